package quant

import "ubatch/internal/cpu"

// AVX2 kernels for Q2_K, Q3_K and IQ4_XS weights with Q8_K activations (dot_k23_amd64.s). They
// compute the same integer sums per super-block as the pure-Go twins in k23.go and differ from
// them only in the order of the float32 operations (see dot_k_amd64_test.go for the tolerance).
// Like the other K-quant kernels they take terms from the Q8_K bsums (Q2_K's mins, Q3_K's +4
// level offset), so activation blocks must be well formed, as QuantizeAct writes them. The
// IQ4_XS kernel multiplies its signed levels as ggml does (the quants take the levels' signs),
// which is exact for activation quants in [-127, 127], all that QuantizeAct writes; a -128
// against a negative level stays -128 instead of becoming +128.

// The assembly kernels: nb super-blocks of weights at w, nx (1..MaxCols) activation rows at x,
// x+xStride, ..., results to out[0:nx]. All pointers must be valid for the whole shape; the Go
// wrappers check that.

//go:noescape
func dotQ2KAVX2(nb int, w *byte, x *byte, xStride int, nx int, out *float32)

//go:noescape
func dotQ3KAVX2(nb int, w *byte, x *byte, xStride int, nx int, out *float32)

//go:noescape
func dotIQ4XSAVX2(nb int, w *byte, x *byte, xStride int, nx int, out *float32)

func init() {
	setDot(Q2_K, cpu.AVX2, dotQ2_KAVX2)
	setDot(Q3_K, cpu.AVX2, dotQ3_KAVX2)
	setDot(IQ4_XS, cpu.AVX2, dotIQ4_XSAVX2)
}

// The assembly DotFuncs for Q2_K, Q3_K and IQ4_XS weights with Q8_K activations.
var (
	dotQ2_KAVX2   = kDot(q2_KBytes, dotQ2KAVX2)
	dotQ3_KAVX2   = kDot(q3_KBytes, dotQ3KAVX2)
	dotIQ4_XSAVX2 = kDot(iq4XSBytes, dotIQ4XSAVX2)
)
