package quant

// AVX2 kernels for the 32-element block formats Q4_0 and Q8_0 (both dotted with Q8_0
// activations). The assembly (dot_q8_amd64.s) follows ggml's AVX2 scheme for the products: weights
// are expanded to 32 signed bytes per block, the activation bytes take the weights' signs
// (vpsignb) so that vpmaddubsw can multiply |w| (unsigned) by ±x (signed), and vpmaddwd sums the
// 16-bit pairs into int32s. Blocks are taken four at a time: each is decoded once for all nx
// columns, and per column the four blocks' integer vectors are reduced horizontally into one
// (lane i = block i), so that one conversion and one FMA with the four blocks' scale products
// (f16 scales converted with vcvtph2ps) serve four blocks. Leftover blocks (nb%4) go through the
// same code padded with zero blocks (dotQTail).
//
// Exactness: the integer part is exact for activation quants in [-127, 127], which is all that
// QuantizeAct produces. A quant of -128 (never written by QuantizeAct) whose weight is negative
// is negated in 8 bits and stays -128, as in ggml. The float part sums in a different order than
// the Go twins, so results agree with them to float32 rounding (see kernels_amd64_test.go).

func init() {
	if hasAVX2 {
		asmKernels[Q4_0] = dotQ4_0AVX2
		asmKernels[Q8_0] = dotQ8_0AVX2
	}
}

//go:noescape
func dotQ4_0AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)

//go:noescape
func dotQ8_0AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)

// dotQ4_0AVX2 is the DotFunc for Q4_0 weights with Q8_0 activations.
func dotQ4_0AVX2(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dotQRowsAVX2(false, k, w, x, xStride, nx, out)
}

// dotQ8_0AVX2 is the DotFunc for Q8_0 weights with Q8_0 activations.
func dotQ8_0AVX2(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dotQRowsAVX2(true, k, w, x, xStride, nx, out)
}

// dotQRowsAVX2 is the DotFunc body of the Q4_0 (or, if q8, Q8_0) kernel: the assembly over the
// blocks in fours, dotQTail for the rest.
func dotQRowsAVX2(q8 bool, k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	nb := k / 32
	rowBytes := nb * q4_0Bytes
	if q8 {
		rowBytes = nb * q8_0Bytes
	}
	if !checkDotArgs(rowBytes, nb*q8_0Bytes, w, x, xStride, nx, out) {
		return
	}
	nb4 := nb &^ 3
	switch {
	case nb4 == 0:
		clear(out[:nx])
	case q8:
		dotQ8_0AVX2Asm(nb4, &w[0], &x[0], xStride, nx, &out[0])
	default:
		dotQ4_0AVX2Asm(nb4, &w[0], &x[0], xStride, nx, &out[0])
	}
	if nb4 < nb {
		dotQTail(q8, nb4, nb, w, x, xStride, nx, out)
	}
}

// dotQTail adds blocks [nb4, nb) (fewer than 4) of a Q4_0 (or, if q8, Q8_0) row to out: the
// assembly takes four blocks at a time, so they are copied to four-block buffers padded with zero
// blocks (zero scales and quants, which add nothing).
func dotQTail(q8 bool, nb4, nb int, w []byte, x []byte, xStride int, nx int, out []float32) {
	var wb [4 * q8_0Bytes]byte
	var xb [MaxCols * 4 * q8_0Bytes]byte
	var res [MaxCols]float32
	const xs = 4 * q8_0Bytes
	for j := 0; j < nx; j++ {
		copy(xb[j*xs:(j+1)*xs], x[j*xStride+nb4*q8_0Bytes:j*xStride+nb*q8_0Bytes])
	}
	if q8 {
		copy(wb[:], w[nb4*q8_0Bytes:nb*q8_0Bytes])
		dotQ8_0AVX2Asm(4, &wb[0], &xb[0], xs, nx, &res[0])
	} else {
		copy(wb[:], w[nb4*q4_0Bytes:nb*q4_0Bytes])
		dotQ4_0AVX2Asm(4, &wb[0], &xb[0], xs, nx, &res[0])
	}
	for j := 0; j < nx; j++ {
		out[j] += res[j]
	}
}
