package main

import (
	"bufio"
	"bytes"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"ubatch/internal/testdata"
	"ubatch/internal/testkit"
)

// serveLikeFlags is a FlagSet with the serve flags llama.cpp's spellings map onto (cmdServe
// defines its own inline; TestServeStartsWithLlamaFlags runs the real one).
func serveLikeFlags(out *bytes.Buffer) (*pflag.FlagSet, *modelFlags) {
	fs := newFlags("serve", "serve", out)
	var mf modelFlags
	var sf samplingFlags
	mf.register(fs, 192)
	sf.register(fs)
	fs.Int("parallel", 16, "")
	fs.String("alias", "", "")
	fs.String("api-key", "", "")
	fs.Duration("read-timeout", 30*time.Second, "")
	fs.Duration("write-timeout", 30*time.Second, "")
	fs.Bool("context-shift", false, "")
	fs.Bool("embeddings", false, "")
	fs.BoolP("verbose", "v", false, "")
	return fs, &mf
}

// TestLlamaFlagSpellings: llama.cpp's command lines parse to the values llama.cpp means, or to a
// one-line refusal, and an ignored flag gets its log line.
func TestLlamaFlagSpellings(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(keyFile, []byte("# the key\nsecret\n"), 0o600)
	for _, tc := range []struct {
		args []string
		want map[string]string // flag name -> value after parsing
		err  string            // substring of the one error line; "" for none
		log  string            // substring of the log
	}{
		{args: []string{"-ngl", "99"}, want: map[string]string{"gpu-layers": "99", "n-predict": "", "model": ""}, log: "-ngl 99: no GPU"},
		{args: []string{"-ngl=all"}, want: map[string]string{"gpu-layers": "all"}},
		{args: []string{"--n-gpu-layers", "7"}, want: map[string]string{"gpu-layers": "7"}},
		{args: []string{"-np", "4", "-ub", "256", "-ctk", "q8_0", "-ctv", "q8_0"}, want: map[string]string{"parallel": "4", "ubatch-size": "256", "cache-type-k": "q8_0", "cache-type-v": "q8_0"}},
		{args: []string{"-fa", "on"}, want: map[string]string{"flash-attn": "on"}, log: "-fa on:"},
		{args: []string{"-fa", "maybe"}, err: "-fa maybe: use on, off, auto"},
		{args: []string{"-tb", "3"}, want: map[string]string{"threads": "3"}},
		{args: []string{"-t", "2", "-tb", "3"}, want: map[string]string{"threads": "2"}},
		{args: []string{"-a", "mine"}, want: map[string]string{"alias": "mine"}},
		{args: []string{"-to", "5"}, want: map[string]string{"read-timeout": "5s", "write-timeout": "5s"}},
		{args: []string{"-to", "5", "--read-timeout", "1s"}, want: map[string]string{"read-timeout": "1s", "write-timeout": "5s"}},
		{args: []string{"-to", "0"}, err: "-to 0: must be a positive number of seconds"},
		{args: []string{"-cb", "-nocb", "--mlock", "--no-mmap", "--metrics", "-kvo", "--numa", "distribute", "-sm", "row", "-ts", "3,1", "-mg", "0", "-dev", "none"},
			want: map[string]string{"cont-batching": "true", "mlock": "true", "no-mmap": "true", "split-mode": "row"}, log: "--mlock:"},
		{args: []string{"-sm", "diagonal"}, err: "-sm diagonal: use none, layer, row, tensor"},
		{args: []string{"-md", "draft.gguf"}, err: "-md draft.gguf: speculative decoding is not supported"},
		{args: []string{"--model-draft", "draft.gguf", "-m", "x.gguf"}, err: "speculative decoding is not supported", want: map[string]string{"model": "x.gguf"}},
		{args: []string{"-hf", "org/repo:Q4_K_M", "-hff", "m.gguf"}, want: map[string]string{"model": "hf://org/repo/m.gguf"}},
		{args: []string{"-hf", "org/repo:Q8_0"}, want: map[string]string{"model": "org/repo:Q8_0"}},
		{args: []string{"-hff", "m.gguf"}, err: "-hff m.gguf: give the repository too"},
		{args: []string{"-n", "64"}, err: "-n 64: a server-wide default is not supported"},
		{args: []string{"-n", "-1"}, want: map[string]string{"n-predict": "-1"}, log: "asks for nothing"},
		{args: []string{"--mirostat", "2"}, err: "--mirostat 2: this sampler is not implemented"},
		{args: []string{"--mirostat", "0", "--mirostat-lr", "0.2"}, want: map[string]string{"mirostat": "0"}},
		{args: []string{"--temperature", "0.5"}, want: map[string]string{"temp": "0.5"}},
		{args: []string{"--embedding", "--log-verbose"}, want: map[string]string{"embeddings": "true", "verbose": "true"}},
		{args: []string{"--no-context-shift"}, want: map[string]string{"context-shift": "false"}},
		{args: []string{"--api-key-file", keyFile}, want: map[string]string{"api-key": "secret"}},
		{args: []string{"--rope-freq-base", "20000"}, err: "RoPE comes from the model's metadata"},
		{args: []string{"--ssl-key-file", "k.pem"}, err: "no TLS"},
		{args: []string{"--mlock=false"}, want: map[string]string{"mlock": "false"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, logs bytes.Buffer
			defer slog.SetDefault(slog.Default())
			slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
			fs, _ := serveLikeFlags(&out)
			err := parse(fs, tc.args)
			if tc.err != "" {
				if err == nil || !strings.Contains(out.String(), tc.err) || strings.Count(out.String(), "\n") != 1 {
					t.Fatalf("error %v, output %q; want one line saying %q", err, out.String(), tc.err)
				}
			} else if err != nil {
				t.Fatalf("error %v: %s", err, out.String())
			}
			for name, want := range tc.want {
				if f := fs.Lookup(name); f == nil || f.Value.String() != want {
					t.Errorf("--%s = %v, want %q", name, f, want)
				}
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log %q does not say %q", logs.String(), tc.log)
			}
		})
	}
}

// TestLlamaAliasesResolveInOneStep: every spelling maps straight onto a registered name, so that
// the FlagSet's normalisation (which looks the target up again) cannot loop; every row names the
// commands it is for, and says why.
func TestLlamaAliasesResolveInOneStep(t *testing.T) {
	for from, to := range aliases {
		if next, ok := aliases[to]; ok {
			t.Errorf("%s -> %s -> %s: a chain", from, to, next)
		}
	}
	for _, f := range llamaFlagTable {
		if f.cmds == "" || strings.Trim(f.cmds, "srbB") != "" || f.note == "" {
			t.Errorf("%q: cmds %q, note %q", f.spell, f.cmds, f.note)
		}
		if (f.how == mapped) != (f.apply != nil) && f.spell != "--no-display-prompt" {
			t.Errorf("%q: a mapped flag needs apply, and only it", f.spell)
		}
	}
}

// llamaHelpFlags are the flag spellings a llama.cpp tool's --help lists, or nil when the built
// tool is not there (../peers/llama.cpp/build/bin beside the repository, or $LLAMA_CPP_BIN).
func llamaHelpFlags(t *testing.T, tool string) []string {
	dir := os.Getenv("LLAMA_CPP_BIN")
	if dir == "" {
		dir = filepath.Join(testdata.Dir(t), "..", "peers", "llama.cpp", "build", "bin")
	}
	out, err := exec.Command(filepath.Join(dir, tool), "--help").CombinedOutput()
	if err != nil && len(out) == 0 {
		t.Skipf("%s not found in %s (set LLAMA_CPP_BIN): %v", tool, dir, err)
	}
	spelling := regexp.MustCompile(`^--?[A-Za-z][A-Za-z0-9.+-]*,?$`)
	var flags []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimLeft(sc.Text(), " ")
		if !strings.HasPrefix(line, "-") || strings.HasPrefix(line, "-----") {
			continue
		}
		for _, tok := range strings.Fields(line) {
			if !spelling.MatchString(tok) {
				break // the placeholder or the description
			}
			flags = append(flags, strings.TrimSuffix(tok, ","))
		}
	}
	if len(flags) < 20 {
		t.Fatalf("only %d flags read from %s --help:\n%s", len(flags), tool, out)
	}
	return flags
}

// TestEveryLlamaFlagIsTaken: every flag llama-server's and llama-bench's --help list is one that
// ubatch serve and ubatch bench take (their own, a spelling, or a table row): none is unknown.
func TestEveryLlamaFlagIsTaken(t *testing.T) {
	for _, c := range []struct{ tool, cmd string }{{"llama-server", "serve"}, {"llama-bench", "bench"}} {
		flags := llamaHelpFlags(t, c.tool)
		for _, flag := range flags {
			// "1" is the value of a flag that takes one, an argument that --help leaves alone
			// after a switch; --help then stops before anything runs.
			code, _, errs := ubatch(t, c.cmd, flag, "1", "--help")
			if code != 0 || strings.Contains(errs, "unknown") {
				t.Errorf("ubatch %s %s: exit %d: %s", c.cmd, flag, code, firstLine(errs))
			}
		}
		t.Logf("%s: %d spellings", c.tool, len(flags))
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// TestRangeErrorsAreOneLine: a value out of range, a refused llama.cpp flag or a wrong format is
// one line naming the flag, the value and the help, with exit status 2 and nothing on stdout.
func TestRangeErrorsAreOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--port", "99999"}, "ubatch serve: --port 99999: must be in [0, 65535] (see ubatch serve --help)"},
		{[]string{"serve", "-np", "-1"}, "ubatch serve: -np -1: need at least one sequence (or 0: adaptive, up to 64) (see ubatch serve --help)"},
		{[]string{"serve", "--policy", "lifo"}, `ubatch serve: --policy "lifo": use fcfs or sjf (see ubatch serve --help)`},
		{[]string{"serve", "--target-itl", "-1s"}, "--target-itl -1s"},
		{[]string{"serve", "--max-conns-per-client", "0"}, "--max-conns-per-client 0"},
		{[]string{"serve", "--shutdown-timeout", "0s"}, "--shutdown-timeout 0s"},
		{[]string{"serve", "--pooling", "max"}, `ubatch serve: --pooling "max": use mean, cls or last (see ubatch serve --help)`},
		{[]string{"serve", "--embedding-priority", "urgent"}, `ubatch serve: --embedding-priority "urgent": use low, normal, high`},
		{[]string{"serve", "--grammar-budget", "0"}, "--grammar-budget"},
		{[]string{"serve", "-md", "draft.gguf"}, "ubatch serve: -md draft.gguf: speculative decoding is not supported"},
		{[]string{"serve", "-ngl"}, "flag needs an argument"},
		{[]string{"run", "-c", "-5"}, "ubatch run: -c -5"},
		{[]string{"batched", "-np", "0"}, "ubatch batched: -np 0: must be at least 1"},
		{[]string{"bench", "-r", "0"}, "ubatch bench: -r 0: must be at least 1 (see ubatch bench --help)"},
		{[]string{"bench", "-o", "xml"}, "ubatch bench: -o xml: use md, json, jsonl, csv"},
		{[]string{"bench", "--batched", "-o", "csv"}, "-o csv: use md or jsonl with --batched"},
		{[]string{"bench", "serve", "--clients", "0"}, "ubatch bench serve: --clients 0: must be at least 1"},
		{[]string{"route", "--nodes", "http://127.0.0.1:1", "--port", "99999"}, "ubatch route: --port 99999: must be in [0, 65535] (see ubatch route --help)"},
		{[]string{"route", "--nodes", "http://127.0.0.1:1", "--fall", "0"}, "ubatch route: --fall 0: must be positive"},
		{[]string{"route", "--nodes", "http://127.0.0.1:1", "--parse-budget", "x"}, `ubatch route: --parse-budget "x": want a positive size such as 64M (see ubatch route --help)`},
		{[]string{"route", "--nodes", "http://127.0.0.1:1", "--prefix-bytes", "0"}, "ubatch route: --prefix-bytes 0: must be positive"},
		{[]string{"route", "--nodes", "http://127.0.0.1:1", "--trusted-proxies", "nope"}, `ubatch route: --trusted-proxies: "nope" is neither a CIDR prefix nor an IP address (see ubatch route --help)`},
		{[]string{"route", "--nodes", "http://127.0.0.1:1", "--mem-limit", "lots"}, `ubatch route: --mem-limit "lots": want a positive size such as 1G or 512M (see ubatch route --help)`},
		{[]string{"route"}, "ubatch route: no nodes: give --nodes, --kube-service or --redis"},
		{[]string{"route", "--nodes", "http://127.0.0.1:1", "--kube-service", "ml/node"}, "ubatch route: --nodes and --kube-service: give one of them"},
		{[]string{"route", "--redis", "redis://127.0.0.1:1", "--kubeconfig", "k.yaml"}, "ubatch route: --kubeconfig without --kube-service"},
		{[]string{"route", "--kube-service", "node"}, `ubatch route: --kube-service "node": no namespace: want NAMESPACE/NAME[:PORTNAME] (see ubatch route --help)`},
		{[]string{"version", "extra"}, "ubatch version: unexpected arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := ubatch(t, tc.args...)
			if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and the one line %q", code, out, errs, tc.want)
			}
		})
	}
}

// TestListDevices: --list-devices prints and exits 0, as llama.cpp's tools do, whatever else
// the command line says.
func TestListDevices(t *testing.T) {
	code, _, errs := ubatch(t, "serve", "--list-devices", "-ngl", "99", "--port", "1")
	if code != 0 || !strings.Contains(errs, "Available devices: none besides the CPU") || strings.Contains(errs, "listening") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, _ := ubatch(t, args...)
		if code != 0 || !strings.HasPrefix(out, version+"\n") {
			t.Errorf("ubatch %v: exit %d, %q", args, code, out)
		}
	}
}

// TestRunLlamaCliFlags: llama-cli's -e unescapes the prompt and --no-display-prompt leaves it
// out of the output.
func TestRunLlamaCliFlags(t *testing.T) {
	model := testdata.Model(t, "stories260K.gguf")
	code, out, errs := ubatch(t, "run", "-m", model, "-p", `Once\nupon`, "-e", "-n", "0", "-ngl", "99")
	if code != 0 || out != "Once\nupon\n" {
		t.Fatalf("-e: exit %d, stdout %q: %s", code, out, errs)
	}
	code, out, errs = ubatch(t, "run", "-m", model, "-p", "Once upon a time", "-n", "4", "--temp", "0", "--no-display-prompt")
	if code != 0 || strings.Contains(out, "Once upon") || strings.TrimSpace(out) == "" {
		t.Fatalf("--no-display-prompt: exit %d, stdout %q: %s", code, out, errs)
	}
}

// TestServeStartsWithLlamaFlags runs a llama-server command line (-ngl 99 -fa on --mlock
// --no-mmap --metrics -cb) through the real cmdServe: it serves /health, logs the ignored flags,
// and stops when its context ends.
func TestServeStartsWithLlamaFlags(t *testing.T) {
	model := testdata.Model(t, "stories260K.gguf")
	n := &servedNode{stderr: &testkit.SyncBuffer{}}
	stderr := n.stderr
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, nil))) // the ignored flags are logged through it
	n.start(t, "-m", model, "-c", "512", "-np", "2", "-ngl", "99", "-fa", "on", "--mlock", "--no-mmap", "--metrics", "-cb")
	resp, err := http.Get(n.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/health: %s", resp.Status)
	}
	for _, want := range []string{"-ngl 99: no GPU", "-fa on:", "--mlock:", "--no-mmap:", "--metrics:", "-cb:"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("no log line saying %q:\n%s", want, stderr.String())
		}
	}
}

// TestOwnFlagWins: a flag the command implements under any of llama.cpp's spellings is the one
// parsed, never the table's row: another engineer's --reranking is not refused as "no rerank".
func TestOwnFlagWins(t *testing.T) {
	var out bytes.Buffer
	fs := newFlags("serve", "serve", &out)
	own := fs.Bool("reranking", false, "")
	format := fs.String("reasoning-format", "auto", "")
	if err := parse(fs, []string{"--reranking", "--reasoning-format", "deepseek", "-ngl", "1"}); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if !*own || *format != "deepseek" || fs.Lookup("rerank") != nil {
		t.Fatalf("--reranking %v, --reasoning-format %q, table's --rerank registered: %v", *own, *format, fs.Lookup("rerank") != nil)
	}
}
