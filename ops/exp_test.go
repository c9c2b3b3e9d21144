package ops

import (
	"math"
	"testing"
)

// expRanges are the argument ranges the exponentials are checked over, each at expSteps+1
// evenly spaced points (expPoint) from lo to hi.
var expRanges = []struct {
	name   string
	lo, hi float32
}{
	{name: "near zero", lo: -1, hi: 0},
	{name: "logit range", lo: -30, hi: 0},
	{name: "down to the cutoff", lo: expCutoff, hi: -30},
	{name: "tiny", lo: -1e-6, hi: 0},
}

const expSteps = 200000

// expPoint is point i of expSteps+1 from lo to hi.
func expPoint(lo, hi float32, i int) float32 { return lo + (hi-lo)*float32(i)/expSteps }

func TestExpNeg(t *testing.T) {
	for _, tc := range expRanges {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i <= expSteps; i++ {
				x := expPoint(tc.lo, tc.hi, i)
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
