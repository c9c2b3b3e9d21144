package quant

// NEON Q4_K kernel (with Q8_K activations): the assembly (dot_q4k_arm64.s) computes a
// super-block's eight integer sub-block dots exactly, with SMULL/SADALP or SDOT like the Q8_0
// kernels; the 6-bit scales and mins, the min correction from the activations' bsums and the two
// float scalings are done here exactly as in the Go twin (dotKScaleMin), so results equal it
// up to the compiler's fusing of the final multiply-adds.

//go:noescape
func q4KDotsNEON(qs, xq *byte, out *[8]int32)

//go:noescape
func q4KDotsSDOT(qs, xq *byte, out *[8]int32)

func init() {
	setNEONRows(Q4_K, dotQ4_KRows)
	setNEONRows(IQ4_XS, dotIQ4XSRows)
}

// dotQ4_KRows is dotKScaleMinRows for Q4_K.
func dotQ4_KRows(sdot bool, k int, w, x []byte, xStride, nx int, out []float32) {
	dotKScaleMinRows(false, sdot, k, w, x, xStride, nx, out)
}

// dotKScaleMinRows is the DotFunc body of the Q4_K (or, if q5, Q5_K, dot_q5k_arm64.go) kernels,
// with SDOT if sdot. The assembly is called directly, not through a func value, so that isub
// stays on the stack.
func dotKScaleMinRows(q5, sdot bool, k int, w, x []byte, xStride, nx int, out []float32) {
	nb := k / QK_K
	blockBytes := q4_KBytes
	if q5 {
		blockBytes = q5_KBytes
	}
	if !checkDotArgs(nb*blockBytes, nb*q8_KBytes, w, x, xStride, nx, out) {
		return
	}
	var acc [MaxCols]float32
	var sc, m [8]uint8
	var isub [8]int32
	for b := 0; b < nb; b++ {
		blk := w[b*blockBytes : (b+1)*blockBytes]
		d, dmin := f16At(blk), f16At(blk[2:])
		for s := 0; s < 8; s++ {
			sc[s], m[s] = scaleMinK4(s, blk[4:16])
		}
		for j := 0; j < nx; j++ {
			o := j*xStride + b*q8_KBytes
			xb := x[o : o+q8_KBytes]
			dx, _, sums := q8KCol(xb)
			switch {
			case q5 && sdot:
				q5KDotsSDOT(&blk[16], &blk[48], &xb[4], &isub)
			case q5:
				q5KDotsNEON(&blk[16], &blk[48], &xb[4], &isub)
			case sdot:
				q4KDotsSDOT(&blk[16], &xb[4], &isub)
			default:
				q4KDotsNEON(&blk[16], &xb[4], &isub)
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

// NEON IQ4_XS kernel: the assembly (iq4XSDots*, dot_q4k_arm64.s) looks up a super-block's
// nibbles and computes its eight integer sub-block dots; the 6-bit scales and the float scaling
// are done here as in the Go twin (dotIQ4XSGo).

//go:noescape
func iq4XSDotsNEON(qs, xq, tab *byte, out *[8]int32)

//go:noescape
func iq4XSDotsSDOT(qs, xq, tab *byte, out *[8]int32)

// dotIQ4XSRows is the DotFunc body of the IQ4_XS kernels, with SDOT if sdot.
func dotIQ4XSRows(sdot bool, k int, w, x []byte, xStride, nx int, out []float32) {
	nb := k / QK_K
	if !checkDotArgs(nb*iq4XSBytes, nb*q8_KBytes, w, x, xStride, nx, out) {
		return
	}
	var acc [MaxCols]float32
	var sc, isub [8]int32
	for b := 0; b < nb; b++ {
		blk := w[b*iq4XSBytes : (b+1)*iq4XSBytes]
		d := f16At(blk)
		for ib := range sc {
			sc[ib] = scalesIQ4XS(blk, ib)
		}
		for j := 0; j < nx; j++ {
			o := j*xStride + b*q8_KBytes
			xb := x[o : o+q8_KBytes]
			if sdot {
				iq4XSDotsSDOT(&blk[8], &xb[4], &iq4Table[0], &isub)
			} else {
				iq4XSDotsNEON(&blk[8], &xb[4], &iq4Table[0], &isub)
			}
			var isum int32
			for ib := 0; ib < 8; ib++ {
				isum += sc[ib] * isub[ib]
			}
			acc[j] += d * f32At(xb) * float32(isum)
		}
	}
	copy(out[:nx], acc[:nx])
}
