package sample

import (
	"math"
	"testing"
)

func TestExpNeg(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi float64
	}{
		{name: "near zero", lo: -1, hi: 0},
		{name: "logit range", lo: -60, hi: 0},
		{name: "deep tail", lo: -699, hi: -600},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const steps = 100000
			for i := 0; i <= steps; i++ {
				x := tc.lo + (tc.hi-tc.lo)*float64(i)/steps
				got, want := expNeg(x), math.Exp(x)
				if rel := math.Abs(got-want) / want; rel > 1e-8 {
					t.Fatalf("expNeg(%v) = %v, want %v (relative error %g)", x, got, want, rel)
				}
			}
		})
	}
	for _, x := range []float64{-700.5, -1e6, math.Inf(-1)} {
		if got := expNeg(x); got != 0 {
			t.Fatalf("expNeg(%v) = %v, want 0", x, got)
		}
	}
	if got := expNeg(0); got != 1 {
		t.Fatalf("expNeg(0) = %v, want exactly 1", got)
	}
}
