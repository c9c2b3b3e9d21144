package ops

import "ubatch/quant"

// On arm64 the four vector kernels use NEON assembly (vec_arm64.s; NEON is part of every arm64
// CPU) for the first multiple of 8 elements, the rest in Go. The activation kernels (SwiGLU,
// softmax) stay the Go twins here; attention over F16 and Q8_0 caches uses these vector kernels
// (attn_arm64.go, attn_q8_arm64.go).

// vecAsm reports whether the AVX2 kernels of vec, act and attn are used: never on arm64 (the
// tests use it to know which summation order softmax has).
const vecAsm = false

// vecNEON reports whether the exported vector kernels use the NEON assembly: always on arm64.
const vecNEON = true

//go:noescape
func dotF32NEON(n int, x, y *float32) float32

//go:noescape
func dotF16NEON(n int, x *float32, y *uint16) float32

//go:noescape
func axpyF32NEON(n int, a float32, x, y *float32)

//go:noescape
func axpyF16NEON(n int, a float32, x *uint16, y *float32)

// DotF32 returns Σ x[i]·y[i] over len(x) elements; len(y) >= len(x).
func DotF32(x, y []float32) float32 {
	y = y[:len(x)]
	n := len(x) &^ 7
	if n == 0 {
		return dotF32Go(x, y)
	}
	s := dotF32NEON(n, &x[0], &y[0])
	for i := n; i < len(x); i++ {
		s += x[i] * y[i]
	}
	return s
}

// DotF16 returns Σ x[i]·half(y[i]) over len(x) elements; len(y) >= len(x).
func DotF16(x []float32, y []uint16) float32 {
	y = y[:len(x)]
	n := len(x) &^ 7
	if n == 0 {
		return dotF16Go(x, y)
	}
	s := dotF16NEON(n, &x[0], &y[0])
	for i := n; i < len(x); i++ {
		s += x[i] * quant.F16ToF32(y[i])
	}
	return s
}

// AxpyF32 computes y[i] += a·x[i] over len(y) elements.
func AxpyF32(a float32, x, y []float32) {
	x = x[:len(y)]
	n := len(y) &^ 7
	if n == 0 {
		axpyF32Go(a, x, y)
		return
	}
	axpyF32NEON(n, a, &x[0], &y[0])
	axpyF32Go(a, x[n:], y[n:])
}

// AxpyF16 computes y[i] += a·half(x[i]) over len(y) elements.
func AxpyF16(a float32, x []uint16, y []float32) {
	x = x[:len(y)]
	n := len(y) &^ 7
	if n == 0 {
		axpyF16Go(a, x, y)
		return
	}
	axpyF16NEON(n, a, &x[0], &y[0])
	axpyF16Go(a, x[n:], y[n:])
}
