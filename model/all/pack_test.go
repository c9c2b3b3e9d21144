package all_test

import (
	"testing"

	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	"ubatch/model"
	"ubatch/quant"
	"ubatch/runner"
)

// TestPackedModel loads models of every packable type, checks which weights were packed, and compares the
// logits of the packed model with those of the same model pointed back at the file's rows (the
// single-row kernels). The panels sum the same integer block products in another order, so
// most positions agree to float32 rounding; but the activations are re-rounded to 8 bits before
// every matmul, and a last-ulp difference can flip one rounding, which this random-weight model
// amplifies to about 1% at a later position and, through the KV cache, the ones after it (as in
// TestBatchedEqualsAlone). So: most positions must agree to 1e-5, and none may differ by more
// than 3% (the Q8_0 tolerance against llama.cpp); wrong panels would be far off everywhere.
func TestPackedModel(t *testing.T) {
	cases := []struct {
		name, model string
		farOK       bool // positions past the first ulp flip may all differ (large Q·K weights)
	}{
		{"q4_0", "synth-tiny-q4_0.gguf", false},
		{"q8_0", "synth-tiny-q8_0.gguf", false},
		{"q4_k_m", "synth-tiny-q4_k_m.gguf", false},
		{"q6_k", "synth-tiny-q6_k.gguf", false},
		// A tied output: token_embd packed once, its rows read from the panels.
		{"llama3-tied", "arch/synth-llama3-q8_0.gguf", true},
		// Experts: each expert's slice of the stacked tensors packed on its own.
		{"qwen3moe", "arch/synth-qwen3moe-q8_0.gguf", false},
		{"gpt-oss", "arch/synth-gpt-oss-mxfp4.gguf", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			packed, plain := load(t, tc.model, false), load(t, tc.model, true)
			n := 0
			pw, qw := plain.Graph.Matrices(), packed.Graph.Matrices()
			for i, w := range pw {
				q := qw[i]
				if want := quant.CanPack(w.Type, w.Cols, w.Rows); q.Packed() != want {
					t.Fatalf("%s: packed %v, want %v", w.Name, q.Packed(), want)
				}
				if len(q.Data) != len(w.Data) {
					t.Fatalf("%s: %d bytes, file has %d", w.Name, len(q.Data), len(w.Data))
				}
				if q.Packed() {
					n++
				}
			}
			if !quant.CanPack(quant.Q8_0, 64, 8) {
				t.Skip("no panel kernels on this CPU: nothing is packed")
			}
			if n == 0 {
				t.Fatal("no weight was packed")
			}
			toks := []int32{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 300, 301}
			got, want := logitsOf(t, packed, toks), logitsOf(t, plain, toks)
			far := 0
			for p := range got {
				rel := testdata.RelRMS(got[p], want[p])
				if rel > 3e-2 {
					t.Fatalf("position %d: packed logits differ from the single-row kernels' by %.2g (relative RMS)", p, rel)
				}
				if rel > 1e-5 {
					far++
				}
			}
			if far > len(got)/2 && !tc.farOK {
				t.Fatalf("%d of %d positions differ by more than 1e-5", far, len(got))
			}
		})
	}
}

func logitsOf(t *testing.T, m *model.Model, toks []int32) [][]float32 {
	t.Helper()
	return promptLogits(t, testmodel.Session(t, m, runner.Options{NCtx: 64, Threads: 2}), toks)
}
