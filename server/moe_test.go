package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"ubatch/engine"
	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	"ubatch/quant"
	"ubatch/runner"
)

// TestMoEGreedyMatchesReference sends the prompt of llama.cpp's reference for each shared
// mixture-of-experts file through /v1/completions with temperature 0 and n = 3 (three sequences
// decoded together, routed to their experts in the same steps): every choice must be the same
// prefix of llama.cpp's greedy text. As many tokens as model/all's TestFamiliesMatchLlamaCpp
// finds clear choices: qwen3moe's eleventh is a near tie, which rounding may decide either way;
// gpt-oss's first 24 are all clear.
func TestMoEGreedyMatchesReference(t *testing.T) {
	cases := []struct {
		name, file, arch string
		tokens           int
	}{
		{"synth-qwen3moe-q8_0", "arch/synth-qwen3moe-q8_0.gguf", "qwen3moe", 10},
		{"synth-gpt-oss-mxfp4", "arch/synth-gpt-oss-mxfp4.gguf", "gpt-oss", 16},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ref := testdata.ReadReference(t, tc.name)
			m := testmodel.Open(t, testdata.Model(t, tc.file))
			if m.Arch != tc.arch || m.Hparams().NExperts != 8 {
				t.Fatalf("loaded %s with %d experts, want %s with 8", m.Arch, m.Hparams().NExperts, tc.arch)
			}
			lctx := testmodel.Runtime(t, m, runner.Options{NCtx: 512, NBatch: 256, NUBatch: 256, NSeqMax: 4, KVType: quant.F16, Threads: 2})
			eng := testmodel.Engine(t, m, lctx, engine.Config{})
			stop := testmodel.Run(t, eng)
			srv, err := New(Config{Model: m, Engine: eng, Dialects: testDialects, ModelID: "moe"})
			if err != nil {
				t.Fatal(err)
			}
			e := serveEnv(t, m, eng, srv, stop, &http.Client{Timeout: 60 * time.Second})
			n := tc.tokens
			res := e.Complete(map[string]any{"prompt": ref.Prompt, "max_tokens": n, "temperature": 0, "n": 3})
			if len(res.Choices) != 3 {
				t.Fatalf("got %d choices, want 3", len(res.Choices))
			}
			for _, c := range res.Choices {
				if c.Text == "" || !strings.HasPrefix(ref.GreedyText, c.Text) {
					t.Errorf("choice %d: greedy text %q is not a prefix of llama.cpp's %q", c.Index, c.Text, ref.GreedyText)
				}
			}
			if res.Usage.CompletionTokens != 3*n {
				t.Errorf("usage %+v: want %d completion tokens", res.Usage, 3*n)
			}
			t.Logf("%q", res.Choices[0].Text)
		})
	}
}
