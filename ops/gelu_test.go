package ops

import (
	"math"
	"testing"
)

func TestGeGLUAndSoftcap(t *testing.T) {
	gate := []float32{-3, -1, 0, 0.5, 2, 6}
	up := []float32{1, 2, 3, 4, 5, 0.5}
	dst := make([]float32, len(gate))
	GeGLU(dst, gate, up)
	for i, x := range gate {
		// Exact GELU, x·Φ(x); the tanh form is within 1e-3 of it.
		want := float64(x) * 0.5 * (1 + math.Erf(float64(x)/math.Sqrt2)) * float64(up[i])
		if math.Abs(float64(dst[i])-want) > 2e-3*math.Max(1, math.Abs(want)) {
			t.Errorf("GeGLU(%g)·%g = %g, want about %g", x, up[i], dst[i], want)
		}
	}
	x := []float32{-100, -1, 0, 1, 100}
	Softcap(x, 30)
	for i, want := range []float64{-30 * math.Tanh(100.0/30), -30 * math.Tanh(1.0/30), 0, 30 * math.Tanh(1.0/30), 30 * math.Tanh(100.0/30)} {
		if math.Abs(float64(x[i])-want) > 1e-4 {
			t.Errorf("softcap element %d = %g, want %g", i, x[i], want)
		}
	}
}
