//go:build amd64 || arm64

package ops

import "ubatch/quant"

// The exported vector kernels on the architectures with assembly: the first multiple of 8
// elements goes to the per-architecture kernels below (AVX2/FMA/F16C in vec_amd64.s; NEON in
// vec_arm64.s, NEON being part of every arm64 CPU) where the selected path runs their assembly
// (runsAsm, kernels.go), the rest to the Go twins. On arm64 the activation kernels (SwiGLU, softmax) stay the Go twins;
// attention over F16 and Q8_0 caches uses these vector kernels there (attn_arm64.go).

// The assembly kernels: n > 0, a multiple of 8, elements at x and y.
//
//go:noescape
func dotF32Asm(n int, x, y *float32) float32

//go:noescape
func dotF16Asm(n int, x *float32, y *uint16) float32

//go:noescape
func axpyF32Asm(n int, a float32, x, y *float32)

//go:noescape
func axpyF16Asm(n int, a float32, x *uint16, y *float32)

// DotF32 returns Σ x[i]·y[i] over len(x) elements; len(y) >= len(x).
func DotF32(x, y []float32) float32 {
	y = y[:len(x)]
	n := len(x) &^ 7
	if !runsAsm(opDotF32) || n == 0 {
		return dotF32Go(x, y)
	}
	s := dotF32Asm(n, &x[0], &y[0])
	for i := n; i < len(x); i++ {
		s += x[i] * y[i]
	}
	return s
}

// DotF16 returns Σ x[i]·half(y[i]) over len(x) elements; len(y) >= len(x).
func DotF16(x []float32, y []uint16) float32 {
	y = y[:len(x)]
	n := len(x) &^ 7
	if !runsAsm(opDotF16) || n == 0 {
		return dotF16Go(x, y)
	}
	s := dotF16Asm(n, &x[0], &y[0])
	for i := n; i < len(x); i++ {
		s += x[i] * quant.F16ToF32(y[i])
	}
	return s
}

// AxpyF32 computes y[i] += a·x[i] over len(y) elements.
func AxpyF32(a float32, x, y []float32) {
	x = x[:len(y)]
	n := len(y) &^ 7
	if !runsAsm(opAxpyF32) || n == 0 {
		axpyF32Go(a, x, y)
		return
	}
	axpyF32Asm(n, a, &x[0], &y[0])
	axpyF32Go(a, x[n:], y[n:])
}

// AxpyF16 computes y[i] += a·half(x[i]) over len(y) elements.
func AxpyF16(a float32, x []uint16, y []float32) {
	x = x[:len(y)]
	n := len(y) &^ 7
	if !runsAsm(opAxpyF16) || n == 0 {
		axpyF16Go(a, x, y)
		return
	}
	axpyF16Asm(n, a, &x[0], &y[0])
	axpyF16Go(a, x[n:], y[n:])
}
