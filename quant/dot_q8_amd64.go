package quant

import "ubatch/internal/cpu"

// AVX2 kernels for the 32-element block formats Q4_0 and Q8_0 (both dotted with Q8_0
// activations). The assembly (dot_q8_amd64.s) follows ggml's AVX2 scheme for the products: weights
// are expanded to 32 signed bytes per block, the activation bytes take the weights' signs
// (vpsignb) so that vpmaddubsw can multiply |w| (unsigned) by ±x (signed), and vpmaddwd sums the
// 16-bit pairs into int32s. Blocks are taken four at a time: each is decoded once for all nx
// columns, and per column the four blocks' integer vectors are reduced horizontally into one
// (lane i = block i), so that one conversion and one FMA with the four blocks' scale products
// (f16 scales converted with vcvtph2ps) serve four blocks. Leftover blocks (nb%4) go through the
// same code padded with zero blocks (dotQ32AVX2, dot_q32_amd64.go).
//
// Exactness: the integer part is exact for activation quants in [-127, 127], which is all that
// QuantizeAct produces. A quant of -128 (never written by QuantizeAct) whose weight is negative
// is negated in 8 bits and stays -128, as in ggml. The float part sums in a different order than
// the Go twins, so results agree with them to float32 rounding (see kernels_test.go).

func init() {
	setDot(Q4_0, cpu.AVX2, dotQ4_0AVX2)
	setDot(Q8_0, cpu.AVX2, dotQ8_0AVX2)
}

//go:noescape
func dotQ4_0AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)

//go:noescape
func dotQ8_0AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)

// The DotFuncs for Q4_0 and Q8_0 weights with Q8_0 activations.
var (
	dotQ4_0AVX2 = q32Dot(dotQ4_0AVX2Asm, q4_0Bytes)
	dotQ8_0AVX2 = q32Dot(dotQ8_0AVX2Asm, q8_0Bytes)
)
