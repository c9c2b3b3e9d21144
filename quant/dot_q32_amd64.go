package quant

import "ubatch/internal/cpu"

// AVX2 kernels for the 32-element block types Q5_0, IQ4_NL, MXFP4, Q4_1 and Q5_1 with Q8_0
// activations (dot_q32_amd64.s), built like the Q4_0 kernel (dot_q8_amd64.go): four blocks per
// step, each decoded once for all nx columns, leftover blocks (nb%4) run padded with zero blocks.
// They compute the same integer block sums as the Go twins in q32.go and mxfp4.go and differ from
// them only in the order (and fusing) of the float32 operations; see kernels_test.go for the
// tolerance. As in the Q4_0 kernel (and ggml), the signed Q5_0, IQ4_NL and MXFP4 levels give their
// signs to the activation quants, which is exact for quants in [-127, 127], all that QuantizeAct
// writes.

func init() {
	setDot(Q5_0, cpu.AVX2, dotQ5_0AVX2)
	setDot(IQ4_NL, cpu.AVX2, dotIQ4NLAVX2)
	setDot(MXFP4, cpu.AVX2, dotMXFP4AVX2)
	setDot(Q4_1, cpu.AVX2, dotQ4_1AVX2)
	setDot(Q5_1, cpu.AVX2, dotQ5_1AVX2)
}

// The assembly kernels: nb (a multiple of 4, >= 4) blocks of weights at w, nx (1..MaxCols) Q8_0
// activation rows at x, x+xStride, ..., results to out[0:nx].

//go:noescape
func dotQ5_0AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)

//go:noescape
func dotIQ4NLAVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)

//go:noescape
func dotMXFP4AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)

//go:noescape
func dotQ4_1AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)

//go:noescape
func dotQ5_1AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)

// q32Asm is one of the assembly kernels above (or dot_q8_amd64.go's).
type q32Asm func(nb int, w, x *byte, xStride, nx int, out *float32)

// dotQ32AVX2 is the DotFunc body of the AVX2 kernels of the 32-element block types (this file's
// and dot_q8_amd64.go's) for blocks of bb bytes: checks the shape, runs the whole four-block
// groups with asm and then the tail.
func dotQ32AVX2(asm q32Asm, bb int, k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	nb := k / 32
	if !checkDotArgs(nb*bb, nb*q8_0Bytes, w, x, xStride, nx, out) {
		return
	}
	nb4 := nb &^ 3
	if nb4 > 0 {
		asm(nb4, &w[0], &x[0], xStride, nx, &out[0])
	} else {
		clear(out[:nx])
	}
	if nb4 == nb {
		return
	}
	// Blocks [nb4, nb) are copied to four-block buffers padded with zero blocks (zero scales,
	// mins and activation scales, which add nothing).
	var wb [4 * q8_0Bytes]byte // the largest of these blocks
	var xb [MaxCols * 4 * q8_0Bytes]byte
	var res [MaxCols]float32
	const xs = 4 * q8_0Bytes
	copy(wb[:], w[nb4*bb:nb*bb])
	for j := 0; j < nx; j++ {
		copy(xb[j*xs:(j+1)*xs], x[j*xStride+nb4*q8_0Bytes:j*xStride+nb*q8_0Bytes])
	}
	// The buffers stay on the stack (noescape.go): asm, a function value, keeps nothing.
	asm(4, noescapePtr(&wb[0]), noescapePtr(&xb[0]), xs, nx, noescapePtr(&res[0]))
	for j := 0; j < nx; j++ {
		out[j] += res[j]
	}
}

// q32Dot is the DotFunc of the assembly kernel asm for blocks of bb bytes.
func q32Dot(asm q32Asm, bb int) DotFunc {
	return func(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
		dotQ32AVX2(asm, bb, k, w, x, xStride, nx, out)
	}
}

// The DotFuncs for Q5_0, IQ4_NL, MXFP4, Q4_1 and Q5_1 weights with Q8_0 activations.
var (
	dotQ5_0AVX2  = q32Dot(dotQ5_0AVX2Asm, q5_0Bytes)
	dotIQ4NLAVX2 = q32Dot(dotIQ4NLAVX2Asm, iq4NLBytes)
	dotMXFP4AVX2 = q32Dot(dotMXFP4AVX2Asm, mxfp4Bytes)
	dotQ4_1AVX2  = q32Dot(dotQ4_1AVX2Asm, q4_1Bytes)
	dotQ5_1AVX2  = q32Dot(dotQ5_1AVX2Asm, q5_1Bytes)
)
