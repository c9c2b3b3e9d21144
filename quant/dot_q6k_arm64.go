package quant

// NEON Q6_K kernel (with Q8_K activations): the assembly (dot_q6k_arm64.s) decodes a
// super-block's 6-bit levels and computes its sixteen integer group dots exactly, with
// SMULL/SADALP or SDOT; the int8 group scales and the float scaling are applied here exactly as
// in the Go twin (dotQ6_KGo).

//go:noescape
func q6KDotsNEON(blk, xq *byte, out *[16]int32)

//go:noescape
func q6KDotsSDOT(blk, xq *byte, out *[16]int32)

func init() {
	setNEONRows(Q6_K, dotQ6_KRows)
}

// dotQ6_KRows is dotK16Rows (dot_k23_arm64.go) for Q6_K.
func dotQ6_KRows(sdot bool, k int, w, x []byte, xStride, nx int, out []float32) {
	dotK16Rows(true, sdot, k, w, x, xStride, nx, out)
}
