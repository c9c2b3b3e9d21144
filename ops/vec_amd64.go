package ops

import (
	"ubatch/quant"

	"golang.org/x/sys/cpu"
)

// vecAsm reports whether the exported kernels use the AVX2/FMA/F16C assembly in vec_amd64.s
// (the first multiple of 8 elements; the rest is done here in Go).
var vecAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

//go:noescape
func dotF32AVX2(n int, x, y *float32) float32

//go:noescape
func dotF16AVX2(n int, x *float32, y *uint16) float32

//go:noescape
func axpyF32AVX2(n int, a float32, x, y *float32)

//go:noescape
func axpyF16AVX2(n int, a float32, x *uint16, y *float32)

// DotF32 returns Σ x[i]·y[i] over len(x) elements; len(y) >= len(x).
func DotF32(x, y []float32) float32 {
	y = y[:len(x)]
	n := len(x) &^ 7
	if !vecAsm || n == 0 {
		return dotF32Go(x, y)
	}
	s := dotF32AVX2(n, &x[0], &y[0])
	for i := n; i < len(x); i++ {
		s += x[i] * y[i]
	}
	return s
}

// DotF16 returns Σ x[i]·half(y[i]) over len(x) elements; len(y) >= len(x).
func DotF16(x []float32, y []uint16) float32 {
	y = y[:len(x)]
	n := len(x) &^ 7
	if !vecAsm || n == 0 {
		return dotF16Go(x, y)
	}
	s := dotF16AVX2(n, &x[0], &y[0])
	for i := n; i < len(x); i++ {
		s += x[i] * quant.F16ToF32(y[i])
	}
	return s
}

// AxpyF32 computes y[i] += a·x[i] over len(y) elements.
func AxpyF32(a float32, x, y []float32) {
	x = x[:len(y)]
	n := len(y) &^ 7
	if !vecAsm || n == 0 {
		axpyF32Go(a, x, y)
		return
	}
	axpyF32AVX2(n, a, &x[0], &y[0])
	axpyF32Go(a, x[n:], y[n:])
}

// AxpyF16 computes y[i] += a·half(x[i]) over len(y) elements.
func AxpyF16(a float32, x []uint16, y []float32) {
	x = x[:len(y)]
	n := len(y) &^ 7
	if !vecAsm || n == 0 {
		axpyF16Go(a, x, y)
		return
	}
	axpyF16AVX2(n, a, &x[0], &y[0])
	axpyF16Go(a, x[n:], y[n:])
}
