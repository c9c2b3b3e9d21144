package synth_test

import (
	"math"
	"reflect"
	"testing"

	"ubatch/batch"
	"ubatch/gguf"
	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	"ubatch/model"
	_ "ubatch/model/all"
	"ubatch/runner"
	"ubatch/synth"
)

// TestFamiliesRun writes a mini model of every family into a temporary directory, opens it with
// model.Open, and decodes two sequences together — seq 0's 22-token prompt (past gemma's
// 16-token window) in micro-batches of 8 mixed with seq 1's prompt, then one decode token of
// each — checking that every logit is finite and every row equals the same sequence decoded
// alone. F32 weights compute the same sums either way (bound 1e-5); Q8_0 re-rounds activations
// to 8 bits, where a last-ulp difference between kernel paths may flip one rounding (1e-2, as
// model/all's TestBatchedEqualsAlone).
func TestFamiliesRun(t *testing.T) {
	hist := [][]int32{
		{1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 40},
		{1, 290, 291, 292, 293, 294, 295},
	}
	for _, a := range synth.Archs {
		for _, tc := range []struct {
			ftype  string
			maxRel float64
		}{{"f32", 1e-5}, {"q8_0", 1e-2}} {
			t.Run(a.Name+"-"+tc.ftype, func(t *testing.T) {
				m := openFixture(t, a.Name, tc.ftype)
				if m.Arch != a.GGUF {
					t.Fatalf("general.architecture %q, want %q", m.Arch, a.GGUF)
				}
				c := testmodel.Session(t, m, runner.Options{NCtx: 128, NSeqMax: 2, NUBatch: 8, Threads: 2})
				got := [][][]float32{make([][]float32, len(hist[0])), make([][]float32, len(hist[1]))}
				var b batch.Batch
				decode := func() {
					if err := c.Decode(&b); err != nil {
						t.Fatal(err)
					}
					for i := range b.Len() {
						s := b.Seqs[i][0]
						got[s][b.Pos[i]] = finite(t, c.Logits(i))
					}
				}
				for s, h := range hist {
					for p := range len(h) - 1 {
						b.Add(h[p], int32(p), []int32{int32(s)}, true)
					}
				}
				decode()
				b.Clear()
				for s, h := range hist {
					b.Add(h[len(h)-1], int32(len(h)-1), []int32{int32(s)}, true)
				}
				decode()
				// A degenerate model (uniform logits, ignored inputs) would pass the comparison.
				if e := testdata.RelRMS(got[0][1], got[0][2]); e < 1e-3 {
					t.Fatalf("logits of positions 1 and 2 differ by only %.1e: the model ignores its input", e)
				}
				for s, h := range hist {
					alone := testmodel.Session(t, m, runner.Options{NCtx: 128, Threads: 2})
					b.Clear()
					for p, tok := range h {
						b.Add(tok, int32(p), []int32{0}, true)
					}
					if err := alone.Decode(&b); err != nil {
						t.Fatal(err)
					}
					for p := range h {
						if e := testdata.RelRMS(got[s][p], alone.Logits(p)); e > tc.maxRel {
							t.Errorf("seq %d pos %d: batched vs alone relative RMS %.2e > %.0e", s, p, e, tc.maxRel)
						}
					}
				}
			})
		}
	}
}

// openFixture writes synth.Fixture(arch, ftype) into t.TempDir() and opens it.
func openFixture(t *testing.T, arch, ftype string) *model.Model {
	t.Helper()
	w, err := synth.Fixture(arch, ftype)
	if err != nil {
		t.Fatal(err)
	}
	return testmodel.Open(t, testmodel.Write(t, w, arch+".gguf"))
}

// finite fails the test on a NaN or infinite logit, and returns a copy of the row.
func finite(t *testing.T, row []float32) []float32 {
	t.Helper()
	if row == nil {
		t.Fatal("no logits")
	}
	for i, v := range row {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("logit %d is %v", i, v)
		}
	}
	return append([]float32(nil), row...)
}

// TestLayoutMatchesShared builds every family at its default shape with its default vocabulary
// and compares the result with the family's shared file (../shared/models/arch): the same
// metadata keys and values (but general.name) and the same tensors, types and shapes.
func TestLayoutMatchesShared(t *testing.T) {
	for _, a := range synth.Archs[1:] { // llama has no shared arch file
		t.Run(a.Name, func(t *testing.T) {
			if a.Gemma4 {
				t.Skip("no shared file: model/gemma4's references check its layout against llama.cpp's loader")
			}
			ftype := a.SharedType
			if ftype == "" {
				ftype = "q8_0"
			}
			want := openShared(t, "arch/synth-"+a.Name+"-"+ftype+".gguf")
			vocab := openShared(t, "vocab/"+a.Vocab)
			w, err := synth.Build(synth.Options{Arch: a.Name, FileType: ftype, Vocab: vocab, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			got := testmodel.Parse(t, w)
			meta := func(f *gguf.File) map[string]any {
				m := map[string]any{}
				for _, kv := range f.Metadata {
					if kv.Key != "general.name" {
						m[kv.Key] = kv.Value
					}
				}
				return m
			}
			gm, wm := meta(got), meta(want)
			for k, v := range wm {
				if g, ok := gm[k]; !ok {
					t.Errorf("metadata %s is missing", k)
				} else if !reflect.DeepEqual(g, v) {
					t.Errorf("metadata %s = %v (%T), shared file has %v (%T)", k, g, g, v, v)
				}
			}
			for k := range gm {
				if _, ok := wm[k]; !ok {
					t.Errorf("metadata %s is not in the shared file", k)
				}
			}
			if len(got.Tensors) != len(want.Tensors) {
				t.Errorf("%d tensors, shared file has %d", len(got.Tensors), len(want.Tensors))
			}
			for _, wt := range want.Tensors {
				gt, ok := got.Tensor(wt.Name)
				if !ok {
					t.Errorf("tensor %s is missing", wt.Name)
				} else if gt.Type != wt.Type || !reflect.DeepEqual(gt.Dims, wt.Dims) {
					t.Errorf("tensor %s is %v %v, shared file has %v %v", wt.Name, gt.Type, gt.Dims, wt.Type, wt.Dims)
				}
			}
		})
	}
}

func openShared(t *testing.T, name string) *gguf.File {
	t.Helper()
	f, err := gguf.Open(testdata.Model(t, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
