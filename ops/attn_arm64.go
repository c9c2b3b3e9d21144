package ops

import "ubatch/quant"

// F16 attention on arm64: each KV row is widened to float32 once (cvtF16NEON, in vec_arm64.s)
// into a stack buffer, then dotted with (scores) or added to (values) every head's vector with
// the NEON F32 kernels. Rows longer than attnRowMax (no model has such heads) use the
// Go twins.

// attnRowMax is the longest head dimension the stack buffer holds.
const attnRowMax = 512

//go:noescape
func cvtF16NEON(n int, src *uint16, dst *float32)

// widenRow writes float32(half(src[i])) to dst[i] for i < len(dst); len(src) >= len(dst).
func widenRow(dst []float32, src []uint16) {
	src = src[:len(dst)]
	n := len(dst) &^ 7
	if n > 0 {
		cvtF16NEON(n, &src[0], &dst[0])
	}
	for i := n; i < len(dst); i++ {
		dst[i] = quant.F16ToF32(src[i])
	}
}

func attnScoresF16(q []float32, heads, hd int, k []uint16, cells []int32, stride int, scale float32, out []float32) {
	if hd > attnRowMax {
		attnScoresF16Go(q, heads, hd, k, cells, stride, scale, out)
		return
	}
	var buf [attnRowMax]float32
	row := buf[:hd]
	n := len(cells)
	for j, c := range cells {
		widenRow(row, k[int(c)*stride:])
		for h := range heads {
			out[h*n+j] = scale * DotF32(q[h*hd:(h+1)*hd], row)
		}
	}
}

func attnValuesF16(p []float32, heads, hd int, v []uint16, cells []int32, stride int, out []float32) {
	if hd > attnRowMax {
		attnValuesF16Go(p, heads, hd, v, cells, stride, out)
		return
	}
	var buf [attnRowMax]float32
	row := buf[:hd]
	n := len(cells)
	out = out[:heads*hd]
	clear(out)
	for j, c := range cells {
		widenRow(row, v[int(c)*stride:])
		for h := range heads {
			AxpyF32(p[h*n+j], row, out[h*hd:(h+1)*hd])
		}
	}
}
