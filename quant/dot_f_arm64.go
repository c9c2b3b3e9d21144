package quant

import (
	"encoding/binary"
	"math"
)

// NEON kernels for F32, F16 and BF16 weights with F32 activations (dot_f_arm64.s): the first
// multiple of 8 elements of each column in assembly (fused multiply-adds into eight float
// lanes), the rest here. They agree with the Go twins to float32 rounding.

//go:noescape
func dotF32RowNEON(n int, w, x *byte) float32

//go:noescape
func dotF16RowNEON(n int, w, x *byte) float32

//go:noescape
func dotBF16RowNEON(n int, w, x *byte) float32

func init() {
	for _, wt := range []Type{F32, F16, BF16} {
		setNEON(wt, func(k int, w, x []byte, xStride, nx int, out []float32) {
			dotFloatRows(wt, k, w, x, xStride, nx, out)
		}, nil)
	}
}

// dotFloatRows is the DotFunc body of the float kernels for weight type wt (F32, F16 or BF16).
func dotFloatRows(wt Type, k int, w, x []byte, xStride, nx int, out []float32) {
	ws := wt.TypeSize()
	if !checkDotArgs(k*ws, 4*k, w, x, xStride, nx, out) {
		return
	}
	n := k &^ 7
	for j := 0; j < nx; j++ {
		xr := x[j*xStride : j*xStride+4*k]
		var s float32
		if n > 0 {
			switch wt {
			case F32:
				s = dotF32RowNEON(n, &w[0], &xr[0])
			case F16:
				s = dotF16RowNEON(n, &w[0], &xr[0])
			default:
				s = dotBF16RowNEON(n, &w[0], &xr[0])
			}
		}
		for i := n; i < k; i++ {
			s += floatAt(wt, w[i*ws:]) * f32At(xr[4*i:])
		}
		out[j] = s
	}
}

// floatAt decodes the weight of type wt (F32, F16 or BF16) at the start of b.
func floatAt(wt Type, b []byte) float32 {
	switch wt {
	case F32:
		return f32At(b)
	case F16:
		return f16Table[binary.LittleEndian.Uint16(b)]
	}
	return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16)
}
