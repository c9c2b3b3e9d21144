package quant

// NEON Q2_K and Q3_K kernels (with Q8_K activations): the assembly (dot_k23_arm64.s) decodes a
// super-block's 2-bit (Q3_K: plus hmask) levels and computes its sixteen integer group dots
// exactly, with SMULL/SADALP or SDOT; the scales, Q2_K's min correction from the bsums and the
// float scaling are done here as in the Go twins (dotQ2_KGo, dotQ3_KGo).

//go:noescape
func q2KDotsNEON(qs, hm, xq *byte, out *[16]int32)

//go:noescape
func q2KDotsSDOT(qs, hm, xq *byte, out *[16]int32)

//go:noescape
func q3KDotsNEON(qs, hm, xq *byte, out *[16]int32)

//go:noescape
func q3KDotsSDOT(qs, hm, xq *byte, out *[16]int32)

func init() {
	setNEONRows(Q2_K, dotQ2_KRows)
	setNEONRows(Q3_K, dotQ3_KRows)
}

// dotQ2_KRows is the DotFunc body of the Q2_K kernels, with SDOT if sdot.
func dotQ2_KRows(sdot bool, k int, w, x []byte, xStride, nx int, out []float32) {
	nb := k / QK_K
	if !checkDotArgs(nb*q2_KBytes, nb*q8_KBytes, w, x, xStride, nx, out) {
		return
	}
	var acc [MaxCols]float32
	var isub [16]int32
	for b := 0; b < nb; b++ {
		blk := w[b*q2_KBytes : (b+1)*q2_KBytes]
		d, dmin := f16At(blk[80:]), f16At(blk[82:])
		sc := blk[:16]
		for j := 0; j < nx; j++ {
			o := j*xStride + b*q8_KBytes
			xb := x[o : o+q8_KBytes]
			if sdot {
				q2KDotsSDOT(&blk[16], &blk[16], &xb[4], &isub)
			} else {
				q2KDotsNEON(&blk[16], &blk[16], &xb[4], &isub)
			}
			var isum, msum int32
			for g := 0; g < 16; g++ {
				isum += int32(sc[g]&0xf) * isub[g]
				msum += int32(sc[g]>>4) * q8KBsum(xb, g)
			}
			dx := f32At(xb)
			acc[j] += d*dx*float32(isum) - dmin*dx*float32(msum)
		}
	}
	copy(out[:nx], acc[:nx])
}

// dotQ3_KRows is dotK16Rows for Q3_K.
func dotQ3_KRows(sdot bool, k int, w, x []byte, xStride, nx int, out []float32) {
	dotK16Rows(false, sdot, k, w, x, xStride, nx, out)
}

// dotK16Rows is the DotFunc body of the Q3_K (or, if q6, Q6_K, dot_q6k_arm64.go) kernels, with
// SDOT if sdot: a super-block's sixteen group dots times its signed group scales, times its f16
// scale d. The assembly is called directly, not through a func value, so that isub stays on the
// stack.
func dotK16Rows(q6, sdot bool, k int, w, x []byte, xStride, nx int, out []float32) {
	nb := k / QK_K
	blockBytes, dOff := q3_KBytes, 108
	if q6 {
		blockBytes, dOff = q6_KBytes, 208
	}
	if !checkDotArgs(nb*blockBytes, nb*q8_KBytes, w, x, xStride, nx, out) {
		return
	}
	var acc [MaxCols]float32
	var isub [16]int32
	var sc [16]int8
	for b := 0; b < nb; b++ {
		blk := w[b*blockBytes : (b+1)*blockBytes]
		d := f16At(blk[dOff:])
		if q6 {
			for g := range sc {
				sc[g] = int8(blk[192+g])
			}
		} else {
			scalesQ3_K(&sc, blk[96:108])
		}
		for j := 0; j < nx; j++ {
			o := j*xStride + b*q8_KBytes
			xb := x[o : o+q8_KBytes]
			switch {
			case q6 && sdot:
				q6KDotsSDOT(&blk[0], &xb[4], &isub)
			case q6:
				q6KDotsNEON(&blk[0], &xb[4], &isub)
			case sdot:
				q3KDotsSDOT(&blk[32], &blk[0], &xb[4], &isub)
			default:
				q3KDotsNEON(&blk[32], &blk[0], &xb[4], &isub)
			}
			var isum int32
			for g := 0; g < 16; g++ {
				isum += int32(sc[g]) * isub[g]
			}
			acc[j] += d * f32At(xb) * float32(isum)
		}
	}
	copy(out[:nx], acc[:nx])
}
