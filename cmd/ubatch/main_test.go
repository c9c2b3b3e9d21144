package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"ubatch/internal/testdata"
)

// ubatch runs the CLI in-process and returns its exit code, stdout and stderr.
func ubatch(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := mainCode(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunGreedyMatchesLlamaCpp(t *testing.T) {
	ref := testdata.LoadReference(t, "stories260K")
	code, out, errs := ubatch(t, "run", "-m", testdata.Model(t, "stories260K.gguf"), "-p", ref.Prompt,
		"-n", "100", "--temp", "0", "--ignore-eos")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if want := ref.Prompt + ref.GreedyText + "\n"; out != want {
		t.Fatalf("run output\n%q\nwant\n%q", out, want)
	}
	if !strings.Contains(errs, "prompt eval time") || !strings.Contains(errs, "tokens per second") {
		t.Errorf("no performance summary on stderr:\n%s", errs)
	}
}

func TestBatchedGreedySequencesMatchReference(t *testing.T) {
	ref := testdata.LoadReference(t, "stories260K")
	code, out, errs := ubatch(t, "batched", "-m", testdata.Model(t, "stories260K.gguf"), "-p", ref.Prompt,
		"-np", "4", "-n", "100", "--temp", "0", "--ignore-eos")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for i := range 4 {
		want := "sequence " + string(rune('0'+i)) + ":\n\n" + ref.Prompt + ref.GreedyText + "\n"
		if !strings.Contains(out, want) {
			t.Errorf("sequence %d differs from the single-sequence greedy reference:\n%s", i, out)
		}
	}
	if !strings.Contains(errs, "shared") {
		t.Errorf("no KV summary:\n%s", errs)
	}
}

func TestLogitsCommandMatchesReference(t *testing.T) {
	ref := testdata.LoadReference(t, "stories260K")
	path := filepath.Join(t.TempDir(), "logits.f32")
	code, _, errs := ubatch(t, "logits", "-m", testdata.Model(t, "stories260K.gguf"), "-p", ref.Prompt, "-o", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 4*len(ref.Logits) {
		t.Fatalf("%d bytes, want %d ([%d][%d] float32)", len(raw), 4*len(ref.Logits), len(ref.PromptTokens), ref.NVocab)
	}
	var num, den float64
	for i, want := range ref.Logits {
		got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		num += float64(got-want) * float64(got-want)
		den += float64(want) * float64(want)
	}
	if e := math.Sqrt(num / den); e > 1e-3 {
		t.Fatalf("logits file relative RMS error %.2e vs llama.cpp", e)
	}
}

func TestSynthModelsLoadAndRun(t *testing.T) {
	vocab := filepath.Join(testdata.Dir(t), "models", "vocab", "ggml-vocab-llama-spm.gguf")
	for _, typ := range []string{"f16", "q8_0", "q4_0", "q4_k_m"} {
		t.Run(typ, func(t *testing.T) {
			dir := t.TempDir()
			model := filepath.Join(dir, "m.gguf")
			code, _, errs := ubatch(t, "synth", "--shape", "tiny", "--type", typ, "--vocab", vocab, "-o", model)
			if code != 0 {
				t.Fatalf("synth: exit %d: %s", code, errs)
			}
			logits := filepath.Join(dir, "l.f32")
			code, _, errs = ubatch(t, "logits", "-m", model, "-p", "Hello world", "-o", logits)
			if code != 0 {
				t.Fatalf("logits: exit %d: %s", code, errs)
			}
			raw, _ := os.ReadFile(logits)
			if len(raw) == 0 || len(raw)%(4*32000) != 0 {
				t.Fatalf("%d bytes of logits", len(raw))
			}
			var spread float64
			for i := 0; i < len(raw); i += 4 {
				v := float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[i:])))
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("non-finite logit at %d", i/4)
				}
				spread = max(spread, math.Abs(v))
			}
			if spread == 0 {
				t.Fatal("all logits are zero")
			}
		})
	}
}

func TestBadInputIsAClearError(t *testing.T) {
	good, err := os.ReadFile(testdata.Model(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	truncated := filepath.Join(dir, "truncated.gguf")
	os.WriteFile(truncated, good[:len(good)/2], 0o644)
	bogus := filepath.Join(dir, "bogus.gguf")
	// The first tensor's offset is the last 8 bytes of its info; find the info by its name.
	b := append([]byte(nil), good...)
	name := []byte("token_embd.weight")
	at := bytes.Index(b, name)
	if at < 0 {
		t.Fatal("no token_embd.weight in the file")
	}
	nd := binary.LittleEndian.Uint32(b[at+len(name):])
	off := at + len(name) + 4 + 8*int(nd) + 4
	binary.LittleEndian.PutUint64(b[off:], 1<<40)
	os.WriteFile(bogus, b, 0o644)
	stories := testdata.Model(t, "stories260K.gguf")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"truncated file", []string{"run", "-m", truncated, "-n", "1"}, "truncated"},
		{"bogus tensor offset", []string{"run", "-m", bogus, "-n", "1"}, "outside the file"},
		{"missing file", []string{"run", "-m", filepath.Join(dir, "nope.gguf"), "-n", "1"}, "not found: pass -m"},
		{"empty prompt", []string{"run", "-m", stories, "-p", "", "-n", "1"}, "prompt is empty"},
		{"prompt longer than the context", []string{"run", "-m", stories, "-c", "16", "-p", strings.Repeat("Once upon a time ", 10), "-n", "1"}, "shorten it or raise -c"},
		{"negative context", []string{"run", "-m", stories, "-c", "-5", "-n", "1"}, "-c -5: the KV cache size must be positive"},
		{"bad flag", []string{"run", "--no-such-flag"}, "unknown flag"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := ubatch(t, tc.args...)
			if code == 0 {
				t.Fatalf("exit 0, want an error")
			}
			if !strings.Contains(errs, tc.want) {
				t.Fatalf("stderr does not say %q:\n%s", tc.want, errs)
			}
		})
	}
}

// TestLlamaCppFlags: llama.cpp's long and short flag names work, values out of range are refused
// before any model is loaded, and a wrong flag gets one line, not the flag list.
func TestLlamaCppFlags(t *testing.T) {
	model := testdata.Model(t, "stories260K.gguf")
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		stderr  string // substring of stderr
		noUsage bool   // stderr must not list the flags
	}{
		{"long names", []string{"run", "--model", model, "--ctx-size", "64", "--n-predict", "4", "--threads", "1", "--prompt", "Once", "--temp", "0"}, 0, "", false},
		{"short names", []string{"run", "-m", model, "-c", "64", "-n", "4", "-t", "1", "-p", "Once", "-s", "7"}, 0, "", false},
		{"llama.cpp single-dash long", []string{"batched", "-m", model, "-np", "2", "-n", "2", "-ub", "32", "--temp", "0"}, 0, "", false},
		{"version", []string{"serve", "--version"}, 0, "", false},
		{"negative ctx", []string{"run", "-c", "-5"}, 2, "-c -5", true},
		{"negative threads", []string{"run", "-t", "-3"}, 2, "-t -3", true},
		{"n below -1", []string{"run", "-n", "-5"}, 2, "-n -5", true},
		{"negative top-k", []string{"run", "--top-k", "-3"}, 2, "--top-k -3", true},
		{"unknown flag", []string{"serve", "--no-such-flag"}, 2, "unknown flag: --no-such-flag (see ubatch serve --help)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := mainCode(tc.args, &out, &errb)
			if code != tc.code || !strings.Contains(errb.String(), tc.stderr) {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", code, tc.code, errb.String(), tc.stderr)
			}
			if tc.noUsage && strings.Contains(errb.String(), "Flags:") {
				t.Errorf("the whole flag list was printed: %s", errb.String())
			}
			if tc.name == "version" && !strings.Contains(out.String()+errb.String(), "ubatch") {
				t.Errorf("--version printed %q", out.String()+errb.String())
			}
		})
	}
}

// TestLogitsWithQ8Cache runs the logits command with llama.cpp's -ctk/-ctv q8_0 on a model whose
// heads fit Q8_0 blocks: the file must be close to the F16 cache's (model/all bounds it tightly).
func TestLogitsWithQ8Cache(t *testing.T) {
	ref := testdata.LoadReference(t, "synth-tiny-f16")
	model := testdata.Model(t, "synth-tiny-f16.gguf")
	read := func(args ...string) []float32 {
		path := filepath.Join(t.TempDir(), "logits.f32")
		code, _, errs := ubatch(t, append([]string{"logits", "-m", model, "-p", ref.Prompt, "-o", path}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, len(raw)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return out
	}
	f16, q8 := read(), read("-ctk", "q8_0", "-ctv", "q8_0")
	if len(q8) != len(f16) || len(f16) == 0 {
		t.Fatalf("%d and %d logits", len(q8), len(f16))
	}
	var num, den float64
	for i := range f16 {
		num += float64(q8[i]-f16[i]) * float64(q8[i]-f16[i])
		den += float64(f16[i]) * float64(f16[i])
	}
	if e := math.Sqrt(num / den); e > 0.02 || e == 0 {
		t.Fatalf("Q8_0 cache logits relative RMS %.2e from the F16 cache's, want (0, 2%%]", e)
	}
}
