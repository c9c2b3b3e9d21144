package runner

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestGLUSwiGLUOAI checks the SwiGLUOAI activation through GLU (split over the pool at this size)
// against llama.cpp's formula: min(g, 7)·sigmoid(1.702·min(g, 7))·(clamp(u, -7, 7)+1).
func TestGLUSwiGLUOAI(t *testing.T) {
	const width, n = 4096, 8
	g := &attnProbe{h: Hparams{Dim: 8, NLayers: 1, NHeads: 1, NKVHeads: 1, HeadDim: 8, FFN: width, Vocab: 8, CtxTrain: 64}}
	c, err := New(g, Options{NCtx: 16, NUBatch: n, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.n = n
	r := rand.New(rand.NewPCG(5, 6))
	gate, up := make([]float32, n*width), make([]float32, n*width)
	for i := range gate {
		gate[i], up[i] = float32(r.NormFloat64()*5), float32(r.NormFloat64()*5)
	}
	in := append([]float32(nil), gate...)
	c.GLU(SwiGLUOAI, gate, up, width)
	clamped := 0
	for i, x := range in {
		gv := math.Min(float64(x), 7)
		uv := math.Max(math.Min(float64(up[i]), 7), -7)
		want := gv / (1 + math.Exp(-1.702*gv)) * (uv + 1)
		if d := math.Abs(float64(gate[i]) - want); d > 1e-5*math.Max(1, math.Abs(want)) {
			t.Fatalf("element %d (gate %g, up %g): %g, want %g", i, x, up[i], gate[i], want)
		}
		if x > 7 || math.Abs(float64(up[i])) > 7 {
			clamped++
		}
	}
	if clamped == 0 {
		t.Fatal("no element was clamped: the test does not cover the clamp")
	}
}
