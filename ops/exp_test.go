package ops

import (
	"math"
	"testing"
)

func TestExpNeg(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi float32
	}{
		{name: "near zero", lo: -1, hi: 0},
		{name: "logit range", lo: -30, hi: 0},
		{name: "down to the cutoff", lo: expCutoff, hi: -30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const steps = 200000
			for i := 0; i <= steps; i++ {
				x := tc.lo + (tc.hi-tc.lo)*float32(i)/steps
				got, want := float64(ExpNeg(x)), math.Exp(float64(x))
				if rel := math.Abs(got-want) / want; rel > 3e-7 {
					t.Fatalf("ExpNeg(%v) = %v, want %v (relative error %g)", x, got, want, rel)
				}
			}
		})
	}
	for _, x := range []float32{expCutoff - 0.001, -700.5, -1e30, float32(math.Inf(-1))} {
		if got := ExpNeg(x); got != 0 {
			t.Fatalf("ExpNeg(%v) = %v, want 0", x, got)
		}
	}
	if got := ExpNeg(0); got != 1 {
		t.Fatalf("ExpNeg(0) = %v, want exactly 1", got)
	}
}
