//go:build amd64 || arm64

package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMXFP4KernelsScales runs every MXFP4 assembly kernel on rows whose blocks all share one scale
// byte, the subnormal ones (e < 2) and the largest whose values are finite floats (252; from 253
// on 12·2^(e-128) overflows, in ggml's dequantization too) included, against the exact float64
// dot with no absolute slack: in mixed rows such blocks are lost in the others' sums.
func TestMXFP4KernelsScales(t *testing.T) {
	ran := false
	for _, v := range asmVariants() {
		if v.skip != "" || v.kernels[MXFP4] == nil {
			continue
		}
		ran = true
		asm := v.kernels[MXFP4]
		for _, e := range []byte{0, 1, 2, 3, 100, 127, 200, 252} {
			r := rand.New(rand.NewPCG(uint64(e), 4))
			const k = 7 * 32 // four-block groups and a tail
			w := make([]byte, MXFP4.RowSize(k))
			for i := range w {
				w[i] = byte(r.Uint32())
			}
			for b := 0; b < k/32; b++ {
				w[b*mxfp4Bytes] = e
			}
			x, xr := mxfp4ScaleActs(r, e, k)
			var out [MaxCols]float32
			asm(k, w, x, xr, MaxCols, out[:])
			wd := decodeRow(t, MXFP4, w, k)
			for j := range MaxCols {
				exact, mag := exactDot(wd, decodeRow(t, Q8_0, x[j*xr:], k))
				if mag == 0 || math.IsInf(mag, 0) {
					t.Fatalf("%s e=%d column %d: test inputs give Σ|terms| %g", v.name, e, j, mag)
				}
				if d := math.Abs(float64(out[j]) - exact); d > asmRelTol*mag {
					t.Errorf("%s e=%d column %d: asm %g, exact %g (|diff| %.3g, Σ|terms| %.3g)",
						v.name, e, j, out[j], exact, d, mag)
				}
			}
		}
	}
	if !ran {
		t.Skip("no MXFP4 assembly kernel runs on this CPU")
	}
}

// mxfp4ScaleActs returns MaxCols Q8_0 activation rows of k values each, xr bytes apart, scaled
// so that their products with MXFP4 blocks of scale byte e stay finite and their own f16 scales
// are not 0.
func mxfp4ScaleActs(r *rand.Rand, e byte, k int) (x []byte, xr int) {
	xs := math.Ldexp(1, max(-14, min(10, 128-int(e))))
	xr = Q8_0.RowSize(k)
	xf := make([]float32, k)
	x = make([]byte, MaxCols*xr)
	for j := range MaxCols {
		for i := range xf {
			xf[i] = float32(r.NormFloat64() * xs)
		}
		QuantizeAct(MXFP4, xf, x[j*xr:])
	}
	return x, xr
}
