package quant

// NEON Q5_K kernel (with Q8_K activations): the assembly (dot_q5k_arm64.s) decodes a
// super-block's 5-bit levels and computes its eight integer sub-block dots exactly, with
// SMULL/SADALP or SDOT; scales, mins and the float scaling are done here as in the Go twin
// (dotKScaleMin).

//go:noescape
func q5KDotsNEON(qh, qs, xq *byte, out *[8]int32)

//go:noescape
func q5KDotsSDOT(qh, qs, xq *byte, out *[8]int32)

func dotQ5_KNEON(k int, w, x []byte, xStride, nx int, out []float32) {
	dotQ5_KRows(false, k, w, x, xStride, nx, out)
}

func dotQ5_KSDOT(k int, w, x []byte, xStride, nx int, out []float32) {
	dotQ5_KRows(true, k, w, x, xStride, nx, out)
}

// dotQ5_KRows is the DotFunc body of the Q5_K kernels, with SDOT if sdot (the assembly is
// called directly so that isub stays on the stack).
func dotQ5_KRows(sdot bool, k int, w, x []byte, xStride, nx int, out []float32) {
	nb := k / QK_K
	if !checkDotArgs(nb*q5_KBytes, nb*q8_KBytes, w, x, xStride, nx, out) {
		return
	}
	var acc [MaxCols]float32
	var sc, m [8]uint8
	var isub [8]int32
	for b := 0; b < nb; b++ {
		blk := w[b*q5_KBytes : (b+1)*q5_KBytes]
		d, dmin := f16At(blk), f16At(blk[2:])
		for s := 0; s < 8; s++ {
			sc[s], m[s] = scaleMinK4(s, blk[4:16])
		}
		for j := 0; j < nx; j++ {
			o := j*xStride + b*q8_KBytes
			xb := x[o : o+q8_KBytes]
			dx, _, sums := q8KCol(xb)
			if sdot {
				q5KDotsSDOT(&blk[16], &blk[48], &xb[4], &isub)
			} else {
				q5KDotsNEON(&blk[16], &blk[48], &xb[4], &isub)
			}
			var isum, msum int32
			for s := 0; s < 8; s++ {
				isum += int32(sc[s]) * isub[s]
				msum += int32(m[s]) * sums[s]
			}
			acc[j] += d*dx*float32(isum) - dmin*dx*float32(msum)
		}
	}
	copy(out[:nx], acc[:nx])
}
