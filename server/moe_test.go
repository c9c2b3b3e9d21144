package server

import (
	"encoding/json"
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

// TestMoEGreedyMatchesReference sends the prompt of llama.cpp's reference for the shared
// qwen3moe file through /v1/completions with temperature 0 and n = 3 (three sequences decoded
// together, routed to their experts in the same steps): every choice must be the same prefix of
// llama.cpp's greedy text. Ten tokens: model/all's TestFamiliesMatchLlamaCpp finds the first ten
// greedy choices clear and the eleventh a near tie, which rounding may decide either way.
func TestMoEGreedyMatchesReference(t *testing.T) {
	var ref struct {
		Prompt     string `json:"prompt"`
		GreedyText string `json:"greedy_text"`
	}
	if err := json.Unmarshal(testdata.ReadFile(t, "reference/synth-qwen3moe-q8_0.json"), &ref); err != nil {
		t.Fatal(err)
	}
	m := testmodel.Open(t, testdata.Model(t, "arch/synth-qwen3moe-q8_0.gguf"))
	if m.Arch != "qwen3moe" || m.Hparams().NExperts != 8 {
		t.Fatalf("loaded %s with %d experts, want qwen3moe with 8", m.Arch, m.Hparams().NExperts)
	}
	lctx := testmodel.Runtime(t, m, runner.Options{NCtx: 512, NBatch: 256, NUBatch: 256, NSeqMax: 4, KVType: quant.F16, Threads: 2})
	eng := testmodel.Engine(t, m, lctx, engine.Config{})
	stop := testmodel.Run(t, eng)
	srv, err := New(Config{Model: m, Engine: eng, ModelID: "moe"})
	if err != nil {
		t.Fatal(err)
	}
	e := serveEnv(t, m, eng, srv, stop, &http.Client{Timeout: 60 * time.Second})
	const n = 10
	res := e.complete(map[string]any{"prompt": ref.Prompt, "max_tokens": n, "temperature": 0, "n": 3})
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
}
