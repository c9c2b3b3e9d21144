package quant

// NEON Q5_K kernel (with Q8_K activations): the assembly (dot_q5k_arm64.s) decodes a
// super-block's 5-bit levels and computes its eight integer sub-block dots exactly, with
// SMULL/SADALP or SDOT; scales, mins and the float scaling are done here as in the Go twin
// (dotKScaleMin), in dotKScaleMinRows (dot_q4k_arm64.go).

//go:noescape
func q5KDotsNEON(qh, qs, xq *byte, out *[8]int32)

//go:noescape
func q5KDotsSDOT(qh, qs, xq *byte, out *[8]int32)

func init() {
	setNEONRows(Q5_K, dotQ5_KRows)
}

// dotQ5_KRows is dotKScaleMinRows for Q5_K.
func dotQ5_KRows(sdot bool, k int, w, x []byte, xStride, nx int, out []float32) {
	dotKScaleMinRows(true, sdot, k, w, x, xStride, nx, out)
}
