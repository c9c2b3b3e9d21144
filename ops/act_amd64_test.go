package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpAVX2 checks the assembly exponential (through expSubSumAVX2 with m = 0) against
// math.Exp: relative error at most 1.5e-7, exactly 1 at ±0, and exactly 0 below expCutoff, as
// ExpNeg. The returned sum is checked against the float64 sum of the outputs within
// (n/16 + 4)·2^-24 relative.
func TestExpAVX2(t *testing.T) {
	if !runsAsm(opSwiGLU) {
		t.Skip("no AVX2/FMA")
	}
	const expRelTol = 1.5e-7
	for _, tc := range expRanges {
		t.Run(tc.name, func(t *testing.T) {
			const steps = expSteps
			x := make([]float32, steps)
			for i := range x {
				x[i] = expPoint(tc.lo, tc.hi, i)
			}
			x[0], x[steps-1] = tc.lo, tc.hi
			in := append([]float32(nil), x...)
			sum := expSubSumAVX2(len(x), 0, &x[0])
			var want float64
			for i, v := range in {
				got, e := float64(x[i]), math.Exp(float64(v))
				if rel := math.Abs(got-e) / e; !(rel <= expRelTol) {
					t.Fatalf("e^%v = %v, want %v (relative error %.3g)", v, got, e, rel)
				}
				want += got
			}
			if rel := math.Abs(float64(sum)-want) / want; !(rel <= float64(steps/16+4)*0x1p-24) {
				t.Fatalf("sum %v, want %v (relative error %.3g)", sum, want, rel)
			}
		})
	}

	negZero := float32(math.Copysign(0, -1))
	cases := []struct {
		name string
		x    float32
		want float32
	}{
		{name: "zero", x: 0, want: 1},
		{name: "negative zero", x: negZero, want: 1},
		{name: "just below the cutoff", x: math.Nextafter32(expCutoff, -100), want: 0},
		{name: "below the underflow", x: -104, want: 0},
		{name: "far below", x: -1e30, want: 0},
		{name: "lowest", x: -math.MaxFloat32, want: 0},
		{name: "-Inf", x: float32(math.Inf(-1)), want: 0},
		{name: "NaN", x: float32(math.NaN()), want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			x := fill(16, tc.x)
			x[3] = 0 // a neighbour that does not flush
			sum := expSubSumAVX2(len(x), 0, &x[0])
			for i, got := range x {
				if i != 3 && math.Float32bits(got) != math.Float32bits(tc.want) {
					t.Fatalf("e^%v = %v in lane %d, want %v", tc.x, got, i, tc.want)
				}
			}
			if want := 15*tc.want + 1; sum != want {
				t.Fatalf("sum %v, want %v", sum, want)
			}
		})
	}
}

func TestMaxAVX2(t *testing.T) {
	if !runsAsm(opSwiGLU) {
		t.Skip("no AVX2/FMA")
	}
	r := rand.New(rand.NewPCG(17, 18))
	for _, n := range []int{8, 16, 24, 32, 40, 64, 72, 1000} {
		for rep := range 20 {
			x := wideF32s(r, n)
			if rep%2 == 0 {
				for i := range x {
					if r.IntN(2) == 0 {
						x[i] = float32(math.Inf(-1))
					}
				}
			}
			want := x[0]
			for _, v := range x {
				want = max(want, v)
			}
			if got := maxAVX2(n, &x[0]); got != want {
				t.Fatalf("n=%d: max %v, want %v", n, got, want)
			}
		}
	}
}
