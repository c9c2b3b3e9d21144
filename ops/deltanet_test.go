package ops

import (
	"math"
	"math/rand/v2"
	"testing"

	"ubatch/quant"
)

// deltaRuleRef is the gated delta rule as written (S ← decay·S, then the write, then the read),
// in float64 over the [dv][dk] state layout: what both paths are checked against.
func deltaRuleRef(out, s, k, q, v []float32, dk, dv int, decay, beta, scale float32) {
	for j := range dv {
		row := s[j*dk : (j+1)*dk]
		var dot float64
		for i := range row {
			row[i] *= decay
			dot += float64(row[i]) * float64(k[i])
		}
		d := float64(beta) * (float64(v[j]) - dot)
		var o float64
		for i := range row {
			row[i] = float32(float64(row[i]) + d*float64(k[i]))
			o += float64(row[i]) * float64(q[i])
		}
		out[j] = scale * float32(o)
	}
}

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = r.Float32()*2 - 1
	}
	return x
}

// TestDeltaRuleStep runs several tokens of the rule through DeltaRuleStep on every kernel path
// (auto: AVX2 on amd64 where dk is a multiple of 8; go: the twin) and checks the outputs and the
// state against the float64 reference within float32 rounding.
func TestDeltaRuleStep(t *testing.T) {
	old := quant.KernelPath()
	defer func() {
		if err := quant.SetKernelPath(old); err != nil {
			t.Fatal(err)
		}
	}()
	cases := []struct {
		name   string
		dk, dv int
	}{
		{"qwen35 heads", 128, 128},
		{"synth heads", 32, 32},
		{"one vector", 8, 3},
		{"dk not a multiple of 8", 20, 7},
	}
	for _, path := range []string{"auto", "go"} {
		if err := quant.SetKernelPath(path); err != nil {
			t.Fatal(err)
		}
		for _, tc := range cases {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(tc.dk), uint64(tc.dv)))
				s := randVec(r, tc.dk*tc.dv)
				ref := append([]float32(nil), s...)
				out, want := make([]float32, tc.dv), make([]float32, tc.dv)
				for tok := range 5 {
					k, q, v := randVec(r, tc.dk), randVec(r, tc.dk), randVec(r, tc.dv)
					decay, beta := float32(math.Exp(-0.3*float64(tok))), r.Float32()
					DeltaRuleStep(out, s, k, q, v, tc.dk, tc.dv, decay, beta, 0.25)
					deltaRuleRef(want, ref, k, q, v, tc.dk, tc.dv, decay, beta, 0.25)
					for j := range out {
						if d := math.Abs(float64(out[j] - want[j])); d > 1e-4*(1+math.Abs(float64(want[j]))) {
							t.Fatalf("token %d out[%d] = %g, want %g", tok, j, out[j], want[j])
						}
					}
				}
				for i := range s {
					if d := math.Abs(float64(s[i] - ref[i])); d > 1e-4*(1+math.Abs(float64(ref[i]))) {
						t.Fatalf("state[%d] = %g, want %g", i, s[i], ref[i])
					}
				}
			})
		}
	}
}

// TestCausalConvStep feeds a sequence through CausalConvStep and checks every output against the
// convolution of the whole input written out (zeros before the first token), and that the state
// ends holding the last k-1 inputs.
func TestCausalConvStep(t *testing.T) {
	cases := []struct {
		name  string
		ch, k int
	}{
		{"qwen35", 256, 4},
		{"two taps", 5, 2},
		{"one tap", 3, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tc.ch), uint64(tc.k)))
			w := randVec(r, tc.ch*tc.k)
			state := make([]float32, (tc.k-1)*tc.ch)
			const n = 7
			xs := make([][]float32, n)
			out := make([]float32, tc.ch)
			for tok := range n {
				xs[tok] = randVec(r, tc.ch)
				CausalConvStep(out, state, xs[tok], w, tc.ch, tc.k)
				for c := range tc.ch {
					var sum float64
					for j := range tc.k {
						if src := tok - (tc.k - 1) + j; src >= 0 {
							sum += float64(xs[src][c]) * float64(w[c*tc.k+j])
						}
					}
					want := sum / (1 + math.Exp(-sum))
					if d := math.Abs(float64(out[c]) - want); d > 1e-5 {
						t.Fatalf("token %d channel %d: %g, want %g", tok, c, out[c], want)
					}
				}
			}
			for j := range tc.k - 1 {
				for c := range tc.ch {
					if got, want := state[j*tc.ch+c], xs[n-(tc.k-1)+j][c]; got != want {
						t.Fatalf("state row %d channel %d = %g, want input %g", j, c, got, want)
					}
				}
			}
		})
	}
}

// TestL2NormSoftplus checks the two scalar helpers at their edges.
func TestL2NormSoftplus(t *testing.T) {
	x := []float32{3, 4}
	L2Norm(x, 1e-6)
	if x[0] != 0.6 || x[1] != 0.8 {
		t.Errorf("L2Norm(3, 4) = %v, want [0.6 0.8]", x)
	}
	z := []float32{0, 0}
	L2Norm(z, 1e-6) // divides by eps, not by zero
	if z[0] != 0 || z[1] != 0 {
		t.Errorf("L2Norm(0, 0) = %v", z)
	}
	for _, tc := range []struct{ x, want float32 }{{0, float32(math.Ln2)}, {30, 30}, {-30, float32(math.Log1p(math.Exp(-30)))}} {
		if got := Softplus(tc.x); math.Abs(float64(got-tc.want)) > 1e-7 {
			t.Errorf("Softplus(%g) = %g, want %g", tc.x, got, tc.want)
		}
	}
}

// BenchmarkDeltaRuleStep is one token of one Qwen 3.5 head (128 x 128 state).
func BenchmarkDeltaRuleStep(b *testing.B) {
	for _, path := range []string{"auto", "go"} {
		b.Run(path, func(b *testing.B) {
			old := quant.KernelPath()
			defer quant.SetKernelPath(old)
			if err := quant.SetKernelPath(path); err != nil {
				b.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			const dk, dv = 128, 128
			s, k, q, v := randVec(r, dk*dv), randVec(r, dk), randVec(r, dk), randVec(r, dv)
			out := make([]float32, dv)
			b.ReportAllocs()
			b.SetBytes(4 * dk * dv)
			for b.Loop() {
				DeltaRuleStep(out, s, k, q, v, dk, dv, 0.99, 0.5, 0.088)
			}
		})
	}
}
