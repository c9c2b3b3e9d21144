package gemma4_test

import (
	"testing"

	"ubatch/batch"
	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	"ubatch/model"
	"ubatch/quant"
	"ubatch/runner"
)

// TestBatchedEqualsAlone decodes three sequences together (a prompt split over micro-batches
// beside decode tokens of the others, a prefix shared by two sequences decoded once) and checks
// every logit row against the same sequence run alone: the per-layer head sizes, the shared KV
// layers (which read cells other layers stored, this micro-batch's among them) and the per-layer
// inputs must act per token and per sequence. Sequence 0's 14 tokens pass the window of 8.
func TestBatchedEqualsAlone(t *testing.T) {
	cases := []struct {
		name, shape string
		kv          quant.Type
		tiled       bool
	}{
		{"e", "e", quant.F16, false},
		{"e tiled", "e", quant.F16, true}, // tiled where the CPU has the kernel's assembly, else exact

		{"e q8_0 cache", "e", quant.Q8_0, false},
		{"dense", "dense", quant.F16, false},
		{"moe", "moe", quant.F16, false},
	}
	hist := [][]int32{
		{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 300, 310, 320, 330},
		{1, 410, 411, 412, 413, 414, 415},
		{1, 410, 411, 412, 413, 420},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := synthModel(t, tc.shape, "q8_0")
			o := runner.Options{NCtx: 128, NSeqMax: 3, NUBatch: 8, KVType: tc.kv, Threads: 2, TiledAttention: tc.tiled}
			c := testmodel.Session(t, m, o)
			got := make([][][]float32, len(hist))
			for s := range hist {
				got[s] = make([][]float32, len(hist[s]))
			}
			var b batch.Batch
			run := func(add func()) {
				b.Clear()
				add()
				if err := c.Decode(&b); err != nil {
					t.Fatal(err)
				}
				for i := range b.Len() {
					for _, s := range b.Seqs[i] {
						got[s][b.Pos[i]] = append([]float32(nil), c.Logits(i)...)
					}
				}
			}
			run(func() { // the shared prefix of seqs 1 and 2 once
				for p := range 5 {
					b.Add(hist[1][p], int32(p), []int32{1, 2}, true)
				}
			})
			run(func() { // seq 0's prompt (two micro-batches) beside decode tokens of 1 and 2
				for p := range hist[0] {
					b.Add(hist[0][p], int32(p), []int32{0}, true)
				}
				b.Add(hist[1][5], 5, []int32{1}, true)
				b.Add(hist[2][5], 5, []int32{2}, true)
			})
			run(func() { b.Add(hist[1][6], 6, []int32{1}, true) })
			for s, h := range hist {
				want := alone(t, m, o, h)
				for p := range h {
					if got[s][p] == nil {
						t.Fatalf("seq %d pos %d was never decoded", s, p)
					}
					if e := testdata.RelRMS(got[s][p], want[p]); e > 1e-2 {
						t.Errorf("seq %d pos %d: batched vs alone relative RMS %.2e > 1e-2", s, p, e)
					}
				}
			}
		})
	}
}

// alone decodes toks as the only sequence of a fresh session, one batch, and returns the logits
// of every position.
func alone(t *testing.T, m *model.Model, o runner.Options, toks []int32) [][]float32 {
	o.NSeqMax = 1
	c := testmodel.Session(t, m, o)
	var b batch.Batch
	for p, tok := range toks {
		b.Add(tok, int32(p), []int32{0}, true)
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
