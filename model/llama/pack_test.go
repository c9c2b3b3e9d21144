package llama

import (
	"math"
	"testing"

	"ubatch/batch"
	"ubatch/gguf"
	"ubatch/internal/testdata"
	"ubatch/quant"
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
	}{
		{"q4_0", "synth-tiny-q4_0.gguf"},
		{"q8_0", "synth-tiny-q8_0.gguf"},
		{"q4_k_m", "synth-tiny-q4_k_m.gguf"},
		{"q6_k", "synth-tiny-q6_k.gguf"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := gguf.Open(testdata.Model(t, tc.model))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			packed, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			defer packed.Close()
			plain, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			n := 0
			for i := range plain.Layers {
				pl, ql := &plain.Layers[i], &packed.Layers[i]
				for j, w := range []*Weight{&pl.Wq, &pl.Wk, &pl.Wv, &pl.Wo, &pl.Gate, &pl.Up, &pl.Down} {
					q := []*Weight{&ql.Wq, &ql.Wk, &ql.Wv, &ql.Wo, &ql.Gate, &ql.Up, &ql.Down}[j]
					ft, _ := f.Tensor(w.Name)
					if want := quant.CanPack(w.Type, w.Cols, w.Rows); q.packed != want {
						t.Fatalf("%s: packed %v, want %v", w.Name, q.packed, want)
					}
					if len(q.Data) != len(ft.Data) {
						t.Fatalf("%s: %d bytes, file has %d", w.Name, len(q.Data), len(ft.Data))
					}
					if q.packed {
						n++
					}
					w.Data, w.packed = ft.Data, false
				}
			}
			if !quant.CanPack(quant.Q8_0, 64, 8) {
				t.Skip("no panel kernels on this CPU: nothing is packed")
			}
			if n == 0 {
				t.Fatal("no weight was packed")
			}
			if plain.Output.Name != "token_embd.weight" {
				ft, _ := f.Tensor(plain.Output.Name)
				plain.Output.Data, plain.Output.packed = ft.Data, false
			}
			toks := []int32{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 300, 301}
			got, want := logitsOf(t, packed, toks), logitsOf(t, plain, toks)
			far := 0
			for p := range got {
				var d2, r2 float64
				for i := range got[p] {
					d := float64(got[p][i] - want[p][i])
					d2 += d * d
					r2 += float64(want[p][i]) * float64(want[p][i])
				}
				rel := math.Sqrt(d2 / r2)
				if rel > 3e-2 {
					t.Fatalf("position %d: packed logits differ from the single-row kernels' by %.2g (relative RMS)", p, rel)
				}
				if rel > 1e-5 {
					far++
				}
			}
			if far > len(got)/2 {
				t.Fatalf("%d of %d positions differ by more than 1e-5", far, len(got))
			}
		})
	}
}

func logitsOf(t *testing.T, m *Model, toks []int32) [][]float32 {
	t.Helper()
	c, err := NewContext(m, Options{NCtx: 64, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b batch.Batch
	for i, tok := range toks {
		b.Add(tok, int32(i), []int32{0}, true)
	}
	if err := c.Decode(&b); err != nil {
		t.Fatal(err)
	}
	out := make([][]float32, len(toks))
	for i := range toks {
		out[i] = append([]float32(nil), c.Logits(i)...)
	}
	return out
}
