package quant

import (
	"fmt"

	"ubatch/internal/cpu"
)

// AVX2 kernels for Q4_K, Q5_K and Q6_K weights with Q8_K activations (dot_k_amd64.s). They
// compute the same integer sums per super-block as the pure-Go twins in dot_k.go and differ from
// them only in the order of the float32 additions (see dot_k_amd64_test.go for the tolerance).
//
// Unlike the Go twins they take Q6_K's -32 level offset (and, like them, the Q4_K/Q5_K mins) from
// the Q8_K bsums, so activation blocks must be well formed (bsums[i] = Σ qs[16i:16i+16]), as
// QuantizeAct writes them.

// The assembly kernels: nb super-blocks of weights at w, nx (1..MaxCols) activation rows at x,
// x+xStride, ..., results to out[0:nx]. All pointers must be valid for the whole shape; the Go
// wrappers check that.

//go:noescape
func dotQ4KAVX2(nb int, w *byte, x *byte, xStride int, nx int, out *float32)

//go:noescape
func dotQ5KAVX2(nb int, w *byte, x *byte, xStride int, nx int, out *float32)

//go:noescape
func dotQ6KAVX2(nb int, w *byte, x *byte, xStride int, nx int, out *float32)

func init() {
	setDot(Q4_K, cpu.AVX2, dotQ4_KAVX2)
	setDot(Q5_K, cpu.AVX2, dotQ5_KAVX2)
	setDot(Q6_K, cpu.AVX2, dotQ6_KAVX2)
}

// kShape checks a K-quant DotFunc call before the assembly runs: the first and last byte of the
// weight row and of every activation row and out[nx-1] are indexed, so an input shorter (by len,
// not cap) than the shape panics with an index error, and nx > MaxCols panics. It returns the
// number of super-blocks, or 0 when there is nothing for the assembly to do (out[:nx] has then
// been zeroed, as the Go twins do).
func kShape(k int, w []byte, blockBytes int, x []byte, xStride int, nx int, out []float32) int {
	if nx > MaxCols {
		panic(fmt.Sprintf("quant: %d activation columns, at most %d", nx, MaxCols))
	}
	out = out[:nx]
	nb := k / QK_K
	if nb <= 0 || nx == 0 {
		clear(out)
		return 0
	}
	_ = out[nx-1]
	_ = w[nb*blockBytes-1]
	rb := nb * q8_KBytes
	for j := 0; j < nx; j++ {
		_ = x[j*xStride]
		_ = x[j*xStride+rb-1]
	}
	return nb
}

// kAsm is one of the assembly kernels above (or dot_k23_amd64.go's).
type kAsm func(nb int, w *byte, x *byte, xStride int, nx int, out *float32)

// kDot is the DotFunc of the K-quant assembly kernel asm for super-blocks of blockBytes.
func kDot(blockBytes int, asm kAsm) DotFunc {
	return func(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
		if nb := kShape(k, w, blockBytes, x, xStride, nx, out); nb > 0 {
			asm(nb, &w[0], &x[0], xStride, nx, &out[0])
		}
	}
}

// The assembly DotFuncs for Q4_K, Q5_K and Q6_K weights with Q8_K activations.
var (
	dotQ4_KAVX2 = kDot(q4_KBytes, dotQ4KAVX2)
	dotQ5_KAVX2 = kDot(q5_KBytes, dotQ5KAVX2)
	dotQ6_KAVX2 = kDot(q6_KBytes, dotQ6KAVX2)
)
