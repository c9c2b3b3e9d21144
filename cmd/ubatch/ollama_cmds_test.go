package main

import (
	"context"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ubatch/internal/demo"
	"ubatch/internal/testkit"
)

// TestLibraryCommands: on a fresh $UBATCH_HOME, list shows the demo model; create adds a local
// GGUF (the file itself or a Modelfile's FROM) under NAME[:TAG]; show prints its header as
// Ollama's show does; list and rm see it. Each step runs in this process, in order.
func TestLibraryCommands(t *testing.T) {
	home := t.TempDir()
	t.Setenv("UBATCH_HOME", home)
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:1") // no network
	work := t.TempDir()
	gguf := filepath.Join(work, "story.gguf")
	if err := os.WriteFile(gguf, []byte(demo.GGUF), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("Modelfile", "# a comment\nFROM ./story.gguf\nLICENSE MIT\n")
	params := write("Modelfile.params", "FROM ./story.gguf\nPARAMETER temperature 0.2\n")
	missing := write("Modelfile.missing", "FROM ./nope.gguf\n")
	noFrom := write("Modelfile.empty", "# nothing\n")
	libPath := filepath.Join(home, "models", "local", "story", "latest.gguf")

	tests := []struct {
		name     string
		args     []string
		code     int
		out, err []string // each must appear
		notOut   []string
	}{
		{"list on a fresh home: the demo model", []string{"list"}, 0,
			[]string{"NAME", demo.Name, "llama", filepath.Join(home, "demo", demo.Name)}, []string{"serves the demo model above"}, nil},
		{"create from the GGUF", []string{"create", "story", "-f", gguf}, 0, []string{"story:latest", libPath}, nil, nil},
		{"create from a Modelfile", []string{"create", "me/story:v1", "-f", good}, 0, []string{"me/story:v1"}, nil, nil},
		{"a Modelfile's PARAMETER is refused", []string{"create", "x", "-f", params}, 1, nil, []string{"Modelfile.params:2: PARAMETER is not supported"}, nil},
		{"a FROM that is no file", []string{"create", "x", "-f", missing}, 1, nil, []string{"FROM " + filepath.Join(work, "nope.gguf") + ": no such file"}, nil},
		{"a Modelfile without FROM", []string{"create", "x", "-f", noFrom}, 1, nil, []string{"neither a GGUF file nor a Modelfile with a FROM line"}, nil},
		{"no name", []string{"create", "-f", gguf}, 2, nil, []string{"name the model"}, nil},
		{"a bad name", []string{"create", "a b", "-f", gguf}, 1, nil, []string{"use NAME[:TAG]"}, nil},
		{"list: the library, no demo", []string{"list"}, 0, []string{"me/story:v1", "story:latest", libPath}, nil, []string{demo.Name}},
		{"show, :latest implied", []string{"show", "story"}, 0,
			[]string{"  Model\n", "architecture", "llama", "parameters", "292.8K", "context length", "2048", "embedding length", "64",
				"quantization", "F32", "  Capabilities\n    completion\n"}, nil, nil},
		{"show the demo model by its name", []string{"show", demo.Name}, 0, []string{"architecture", "llama"}, nil, nil},
		{"show --modelfile", []string{"show", "me/story:v1", "--modelfile"}, 0,
			[]string{"FROM " + filepath.Join(home, "models", "local", "me", "story", "v1.gguf")}, nil, nil},
		{"show an unknown name", []string{"show", "nobody"}, 1, nil, []string{"not found"}, nil},
		{"rm", []string{"rm", "story"}, 0, []string{"removed story:latest"}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := ubatch(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errs)
			}
			testkit.CheckText(t, "stdout", out, tc.out, tc.notOut)
			testkit.CheckText(t, "stderr", errs, tc.err, nil)
		})
	}
}

// TestPsStop: ps lists what a running server has loaded in Ollama's columns; stop unloads it
// now (generate with keep_alive 0) and ps then lists nothing; stopping what is not loaded, or
// asking a port with no server, is a clear error.
func TestPsStop(t *testing.T) {
	home := t.TempDir()
	p := startServeProc(t, []string{"UBATCH_HOME=" + home, "HF_ENDPOINT=http://127.0.0.1:1"}, "-np", "1")
	u, err := url.Parse(p.url)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	const psName = "stories260k:latest" // /api/ps lists Ollama's name:tag, not the file name
	tests := []struct {
		name     string
		args     []string
		code     int
		out, err string
		notOut   string
	}{
		{"ps: the demo model, loaded at start", []string{"ps", "--port", port}, 0, "100% CPU", "", ""},
		{"stop an unknown name", []string{"stop", "nobody", "--port", port}, 1, "", `couldn't find model "nobody" to stop`, ""},
		{"stop", []string{"stop", "stories260k", "--port", port}, 0, "", "", ""},
		{"ps: nothing loaded", []string{"ps", "--port", port}, 0, "NAME", "", psName},
		{"stop again", []string{"stop", demo.Name, "--port", port}, 1, "", "couldn't find model", ""},
		{"no server", []string{"ps", "--port", "1"}, 1, "", "no server at http://127.0.0.1:1", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := ubatch(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errs, tc.err) ||
				(tc.notOut != "" && strings.Contains(out, tc.notOut)) {
				t.Errorf("exit %d (want %d)\nstdout (want %q, not %q):\n%s\nstderr (want %q):\n%s", code, tc.code, tc.out, tc.notOut, out, tc.err, errs)
			}
			if tc.name == "ps: the demo model, loaded at start" {
				lines := strings.Split(strings.TrimSpace(out), "\n")
				if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME ID SIZE PROCESSOR CONTEXT UNTIL" ||
					!strings.HasPrefix(lines[1], psName+" ") || !strings.HasSuffix(lines[1], "Forever") {
					t.Errorf("ps printed:\n%s", out)
				}
			}
		})
	}
}

func TestUntil(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		at   time.Time
		want string
	}{
		{"kept", time.Date(2318, 1, 1, 0, 0, 0, 0, time.UTC), "Forever"},
		{"seconds", now.Add(30 * time.Second), "30 seconds from now"},
		{"a minute", now.Add(90 * time.Second), "About a minute from now"},
		{"minutes", now.Add(4*time.Minute + 59*time.Second), "4 minutes from now"},
		{"an hour", now.Add(61 * time.Minute), "About an hour from now"},
		{"hours", now.Add(5 * time.Hour), "5 hours from now"},
		{"past", now.Add(-time.Second), "Stopping..."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := until(tc.at, now); got != tc.want {
				t.Errorf("until = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRunChat drives `ubatch run` without -p through a pipe on stdin, on the demo model (no
// chat template: the text so far is continued): the >>> prompt, a reply equal to run -p's
// greedy continuation, a multi-line message with """, /clear, an unknown command, /bye; EOF
// ends a session too.
func TestRunChat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	oneShot, _ := freshCommand(t, ctx, "run", "-p", "Once upon a time", "-n", "12", "--temp", "0")
	want, err := oneShot.Output()
	if err != nil {
		t.Fatal(err)
	}
	reply := strings.TrimSuffix(strings.TrimPrefix(string(want), "Once upon a time"), "\n")
	tests := []struct {
		name  string
		stdin string
		want  []string // in this order
	}{
		{"one message, /bye", "Once upon a time\n/bye\n", []string{">>> " + reply + "\n\n>>> "}},
		{"EOF ends it", "Once upon a time\n", []string{">>> " + reply + "\n\n>>> \n"}},
		{"multi-line, commands", "\"\"\"\nOnce upon\na time\n\"\"\"\n/clear\n/nope\n/?\nOnce upon a time\n/bye\n",
			[]string{">>> ... ... ... ", "\n\n>>> Cleared session context\n>>> Unknown command '/nope'. Type /? for help\n",
				">>> Available commands:", "/bye", ">>> " + reply + "\n\n>>> "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd, _ := freshCommand(t, ctx, "run", "-n", "12", "--temp", "0")
			cmd.Stdin = strings.NewReader(tc.stdin)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("ubatch run: %v\n%s", err, stderr.String())
			}
			got, at := string(out), 0
			for _, w := range tc.want {
				i := strings.Index(got[at:], w)
				if i < 0 {
					t.Fatalf("output lacks %q after offset %d:\n%q", w, at, got)
				}
				at += i + len(w)
			}
		})
	}
}

// TestChatHistory: with a chat template, each message is rendered with the conversation so far
// (the user's messages and the model's replies), so the session keeps its history; /clear
// (history nil) starts again. The model is a synthetic one with a ChatML template.
func TestChatHistory(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "chat.jinja")
	chatml := "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
		"{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
	if err := os.WriteFile(tmpl, []byte(chatml), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "qwen3.gguf")
	if code, _, errs := ubatch(t, "synth", "--arch", "qwen3", "--shape", "mini", "--vocab", "builtin",
		"--chat-template", tmpl, "--type", "f32", "-o", path); code != 0 {
		t.Fatalf("synth: %s", errs)
	}
	fs := newFlags("run", "run", &strings.Builder{})
	var mf modelFlags
	var sf samplingFlags
	mf.register(fs, 2048)
	sf.register(fs)
	if err := fs.Parse([]string{"-m", path, "-c", "512", "--temp", "0"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, lctx, _, err := mf.load(ctx, &strings.Builder{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer lctx.Close()
	s, err := newChatSession(m, lctx, sf.params(m.Vocab.EOG()), 6)
	if err != nil {
		t.Fatal(err)
	}
	if s.tmpl == nil {
		t.Fatal("the model's template was not taken")
	}
	var out strings.Builder
	if err := s.run(ctx, strings.NewReader("hello there\nand again\n"), &out); err != nil {
		t.Fatal(err)
	}
	if len(s.history) != 4 || s.history[0]["content"] != "hello there" || s.history[2]["content"] != "and again" {
		t.Fatalf("history %v", s.history)
	}
	toks, err := s.tokens("third")
	if err != nil {
		t.Fatal(err)
	}
	text := m.Vocab.Decode(toks)
	want := "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n" + s.history[1]["content"].(string) +
		"<|im_end|>\n<|im_start|>user\nand again<|im_end|>\n"
	if !strings.Contains(text, want) || !strings.HasSuffix(text, "<|im_start|>user\nthird<|im_end|>\n<|im_start|>assistant\n") {
		t.Errorf("the third message's prompt is\n%q\nwant it to hold\n%q", text, want)
	}
	out.Reset()
	if err := s.run(ctx, strings.NewReader("/clear\n"), &out); err != nil || s.history != nil {
		t.Errorf("/clear: %v, history %v", err, s.history)
	}
}

// TestRunChatInterrupt: Ctrl-C at the >>> prompt ends the session at once, though stdin stays
// open.
func TestRunChatInterrupt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, _ := freshCommand(t, ctx, "run", "-n", "4")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(stdout, buf); err != nil || string(buf) != ">>> " {
		t.Fatalf("read %q, %v; want the prompt", buf, err)
	}
	start := time.Now()
	cmd.Process.Signal(os.Interrupt)
	io.Copy(io.Discard, stdout) // until it exits
	if err := cmd.Wait(); err != nil {
		t.Errorf("run after Ctrl-C: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("run took %v to stop after Ctrl-C", d)
	}
}
