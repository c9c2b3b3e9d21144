package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// swigluOAIRef is gpt-oss's clamped SwiGLU in float64, as llama.cpp's swiglu_oai writes it.
func swigluOAIRef(gate, up, alpha, limit float64) float64 {
	x := math.Min(gate, limit)
	y := math.Max(math.Min(up, limit), -limit)
	return x / (1 + math.Exp(-alpha*x)) * (y + 1)
}

func TestSwiGLUOAI(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	tests := []struct {
		name     string
		gate, up []float32
	}{
		{name: "zero up passes the gate", gate: []float32{1, -1, 0, 3}, up: []float32{0, 0, 0, 0}},
		{name: "gate clamped above only", gate: []float32{7, 8, 100, -8, -100}, up: []float32{1, 1, 1, 1, 1}},
		{name: "up clamped both sides", gate: []float32{2, 2, 2, 2}, up: []float32{7, 9, -7, -50}},
		{name: "random wide", gate: wideish(r, 300, 6), up: wideish(r, 300, 6)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]float32, len(tc.gate))
			SwiGLUOAI(dst, tc.gate, tc.up, 1.702, 7)
			for i := range dst {
				want := swigluOAIRef(float64(tc.gate[i]), float64(tc.up[i]), 1.702, 7)
				if d := math.Abs(float64(dst[i]) - want); d > 1e-6*math.Max(1, math.Abs(want)) {
					t.Fatalf("gate %g up %g: %g, want %g", tc.gate[i], tc.up[i], dst[i], want)
				}
			}
			// In place, as the runner calls it.
			g := append([]float32(nil), tc.gate...)
			SwiGLUOAI(g, g, tc.up, 1.702, 7)
			for i := range g {
				if g[i] != dst[i] {
					t.Fatalf("in place: out[%d] = %g, want %g", i, g[i], dst[i])
				}
			}
		})
	}
}

func wideish(r *rand.Rand, n int, std float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * std)
	}
	return x
}
