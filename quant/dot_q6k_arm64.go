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

// dotQ6_KRows is the DotFunc body of the Q6_K kernels, with SDOT if sdot (the assembly is
// called directly so that isub stays on the stack).
func dotQ6_KRows(sdot bool, k int, w, x []byte, xStride, nx int, out []float32) {
	nb := k / QK_K
	if !checkDotArgs(nb*q6_KBytes, nb*q8_KBytes, w, x, xStride, nx, out) {
		return
	}
	var acc [MaxCols]float32
	var isub [16]int32
	for b := 0; b < nb; b++ {
		blk := w[b*q6_KBytes : (b+1)*q6_KBytes]
		d := f16At(blk[208:])
		sc := blk[192:208]
		for j := 0; j < nx; j++ {
			o := j*xStride + b*q8_KBytes
			xb := x[o : o+q8_KBytes]
			if sdot {
				q6KDotsSDOT(&blk[0], &xb[4], &isub)
			} else {
				q6KDotsNEON(&blk[0], &xb[4], &isub)
			}
			var isum int32
			for g := 0; g < 16; g++ {
				isum += int32(int8(sc[g])) * isub[g]
			}
			acc[j] += d * f32At(xb) * float32(isum)
		}
	}
	copy(out[:nx], acc[:nx])
}
