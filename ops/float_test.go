package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestRMSNorm compares RMSNorm with the formula in float64, for widths around its 4-way
// unrolling, in place and not.
func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 64, 127, 768, 2048} {
		for _, inPlace := range []bool{false, true} {
			t.Run(fmt.Sprintf("n=%d/inplace=%v", n, inPlace), func(t *testing.T) {
				x, w := make([]float32, n), make([]float32, n)
				for i := range x {
					x[i], w[i] = float32(r.NormFloat64()*3), float32(r.NormFloat64())
				}
				var ss float64
				for _, v := range x {
					ss += float64(v) * float64(v)
				}
				scale := 1 / math.Sqrt(ss/float64(n)+1e-5)
				want := make([]float64, n)
				for i, v := range x {
					want[i] = float64(v) * scale * float64(w[i])
				}
				dst := make([]float32, n)
				if inPlace {
					dst = x
				}
				RMSNorm(dst, x, w, 1e-5)
				for i := range want {
					if d := math.Abs(float64(dst[i]) - want[i]); d > 1e-6*math.Abs(want[i])+1e-7 {
						t.Fatalf("element %d: %v, want %v", i, dst[i], want[i])
					}
				}
			})
		}
	}
}

func BenchmarkRMSNorm(b *testing.B) {
	for _, n := range []int{768, 2048} {
		x, w, dst := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range x {
			x[i], w[i] = float32(i%7)-3, 1
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				RMSNorm(dst, x, w, 1e-5)
			}
		})
	}
}
