package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serveProc is `ubatch serve` running in a child process.
type serveProc struct {
	cmd *exec.Cmd
	url string
	log *strings.Builder
}

// startServeProc runs `ubatch serve --port 0 args...` in a process of its own (this test binary as
// ubatch, see TestMain) with env added, and waits for it to listen.
func startServeProc(t *testing.T, env []string, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--port", "0"}, args...)...)
	cmd.Env = append(append(os.Environ(), env...), "UBATCH_TEST_AS_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, log: &strings.Builder{}}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("serve's log:\n%s", p.log)
		}
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.log.WriteString(line + "\n")
			if m := listeningLine.FindStringSubmatch(line); m != nil {
				urls <- m[1]
			}
		}
		close(urls)
	}()
	select {
	case u, ok := <-urls:
		if !ok {
			t.Fatalf("serve exited before listening:\n%s", p.log)
		}
		p.url = u
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not listen within 60 s:\n%s", p.log)
	}
	return p
}

// call sends body (GET when empty) to path and returns the status and body.
func (p *serveProc) call(t *testing.T, path, body string) (int, string) {
	t.Helper()
	var resp *http.Response
	var err error
	if body == "" {
		resp, err = http.Get(p.url + path)
	} else {
		resp, err = http.Post(p.url+path, "application/json", strings.NewReader(body))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rss is the process's resident memory in bytes (VmRSS).
func (p *serveProc) rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc to read the server's memory from: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// psNames lists /api/ps's models.
func (p *serveProc) psNames(t *testing.T) []string {
	t.Helper()
	code, body := p.call(t, "/api/ps", "")
	var ps struct{ Models []struct{ Name string } }
	if err := json.Unmarshal([]byte(body), &ps); code != 200 || err != nil {
		t.Fatalf("/api/ps: %d %s", code, body)
	}
	var names []string
	for _, m := range ps.Models {
		names = append(names, m.Name)
	}
	return names
}

// TestServeLibrary is the library as a user meets it: pull ORG/REPO:QUANT from a stand-in for
// the Hub, list, run -hf (which pulls the other quant), then serve with no -m: both models by
// name over the OpenAI and Ollama routes, an unknown one 404 on both, a third pulled through
// Ollama's /api/pull and served, and after --keep-alive 3s
// of idle time /api/ps is empty and the server's resident memory has fallen by at least half
// the models' file sizes (their mappings and KV pools are gone).
func TestServeLibrary(t *testing.T) {
	if testing.Short() {
		t.Skip("writes two ~60-100 MiB models")
	}
	root := t.TempDir()
	repo := filepath.Join(root, "Org", "Small-GGUF")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	var fileBytes int64
	for _, q := range []string{"q8_0", "q4_0"} {
		out := filepath.Join(repo, "small-"+strings.ToUpper(q)+".gguf")
		if code, _, errs := ubatch(t, "synth", "--arch", "qwen3", "--shape", "small", "--vocab", "builtin", "--type", q, "-o", out); code != 0 {
			t.Fatalf("synth: %s", errs)
		}
		st, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		fileBytes += st.Size()
	}
	mini := filepath.Join(root, "Org", "Mini-GGUF", "mini-Q8_0.gguf") // pulled through /api/pull
	if err := os.MkdirAll(filepath.Dir(mini), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := ubatch(t, "synth", "--arch", "llama", "--shape", "mini", "--vocab", "builtin", "--type", "q8_0", "-o", mini); code != 0 {
		t.Fatalf("synth: %s", errs)
	}
	url, _ := fakeHub(t, root)
	home := t.TempDir()
	t.Setenv("UBATCH_HOME", home)
	t.Setenv("HF_ENDPOINT", url)
	for _, step := range []struct {
		name string
		args []string
		want string // on stdout or stderr
	}{
		{name: "pull", args: []string{"pull", "Org/Small-GGUF:Q8_0"}, want: "small:q8_0"},
		{name: "list", args: []string{"list"}, want: "small:q8_0"},
		{name: "run -hf", args: []string{"run", "-hf", "Org/Small-GGUF:Q4_0", "-p", "a b", "-n", "2", "--temp", "0"}, want: "small:q4_0"},
		{name: "list both", args: []string{"list"}, want: "small:q4_0"},
	} {
		code, out, errs := ubatch(t, step.args...)
		if code != 0 || !strings.Contains(out+errs, step.want) {
			t.Fatalf("%s: exit %d, want %q in:\n%s\n%s", step.name, code, step.want, out, errs)
		}
	}

	p := startServeProc(t, []string{"UBATCH_HOME=" + home}, "--keep-alive", "3s", "-np", "4", "-c", "4096", "-t", "2")
	code, body := p.call(t, "/v1/models", "")
	if code != 200 || !strings.Contains(body, `"id":"small:q4_0"`) || !strings.Contains(body, `"id":"small:q8_0"`) {
		t.Fatalf("/v1/models: %d %s", code, body)
	}
	idle := p.rss(t)
	requests := []struct{ name, path, body, want string }{
		{"openai by name", "/v1/chat/completions", `{"model":"small:q8_0","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`, `"model":"small:q8_0"`},
		{"ollama by source", "/api/generate", `{"model":"Org/Small-GGUF:Q4_0","prompt":"a b","raw":true,"stream":false,"options":{"num_predict":3}}`, `"done":true`},
		{"ollama chat by name", "/api/chat", `{"model":"small:q8_0","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"num_predict":3}}`, `"model":"small:q8_0"`},
		{"openai by source", "/v1/completions", `{"model":"Org/Small-GGUF:Q4_0","prompt":"a","max_tokens":3}`, `"model":"small:q4_0"`},
	}
	for _, r := range requests {
		if code, body := p.call(t, r.path, r.body); code != 200 || !strings.Contains(body, r.want) {
			t.Fatalf("%s: %d %s", r.name, code, body)
		}
	}
	if code, body := p.call(t, "/v1/chat/completions", `{"model":"small:q6_k","messages":[{"role":"user","content":"hi"}]}`); code != 404 || !strings.Contains(body, "model_not_found") {
		t.Errorf("unknown model on /v1: %d %s", code, body)
	}
	if code, body := p.call(t, "/api/chat", `{"model":"small:q6_k","messages":[{"role":"user","content":"hi"}]}`); code != 404 || !strings.HasPrefix(body, `{"error":"model \"small:q6_k\" not found`) {
		t.Errorf("unknown model on /api: %d %s", code, body)
	}
	// Ollama's /api/pull puts a model into the library the server serves.
	code, body = p.call(t, "/api/pull", `{"model":"Org/Mini-GGUF:Q8_0"}`)
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if code != 200 || len(lines) < 2 || lines[0] != `{"status":"pulling manifest"}` || lines[len(lines)-1] != `{"status":"success"}` {
		t.Fatalf("/api/pull: %d %s", code, body)
	}
	if code, body := p.call(t, "/api/pull", `{"model":"Org/None-GGUF:Q8_0","stream":false}`); code != 404 || !strings.HasPrefix(body, `{"error":"pull Org/None-GGUF:Q8_0: `) {
		t.Errorf("/api/pull of a repository the Hub does not have: %d %s", code, body)
	}
	if code, body := p.call(t, "/api/tags", ""); code != 200 || !strings.Contains(body, `"name":"mini:q8_0"`) {
		t.Fatalf("/api/tags after the pull: %d %s", code, body)
	}
	if code, body := p.call(t, "/api/generate", `{"model":"mini:q8_0","prompt":"a","raw":true,"stream":false,"options":{"num_predict":2}}`); code != 200 || !strings.Contains(body, `"done":true`) {
		t.Fatalf("generate on the pulled model: %d %s", code, body)
	}
	if got := p.psNames(t); len(got) != 3 {
		t.Fatalf("/api/ps after a request to each: %v", got)
	}
	loaded := p.rss(t)
	deadline := time.Now().Add(30 * time.Second)
	for len(p.psNames(t)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("/api/ps still lists %v 30 s after the last request (--keep-alive 3s)", p.psNames(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the unload logs after ps drops the model
	after := p.rss(t)
	t.Logf("server RSS: %d MiB idle before loading, %d MiB with the models loaded, %d MiB after they unloaded (files %d MiB)",
		idle>>20, loaded>>20, after>>20, fileBytes>>20)
	if loaded-after < fileBytes/2 {
		t.Errorf("RSS fell by %d MiB after unloading, want at least half the models' %d MiB", (loaded-after)>>20, fileBytes>>20)
	}
	if !strings.Contains(p.log.String(), "model unloaded") {
		t.Error("the log does not say the models were unloaded")
	}
}
