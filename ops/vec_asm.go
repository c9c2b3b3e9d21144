//go:build amd64 || arm64

package ops

import "ubatch/quant"

// The exported vector kernels on the architectures with assembly: the first multiple of 8
// elements goes to the per-architecture kernels dotF32Asm, dotF16Asm, axpyF32Asm and axpyF16Asm
// (AVX2 in vec_amd64.go, NEON in vec_arm64.go) when the selected path runs assembly (vecAsm),
// the rest to the Go twins.

// vecAsm reports whether the exported vector kernels run assembly.
func vecAsm() bool { return asmOn() }

// DotF32 returns Σ x[i]·y[i] over len(x) elements; len(y) >= len(x).
func DotF32(x, y []float32) float32 {
	y = y[:len(x)]
	n := len(x) &^ 7
	if !vecAsm() || n == 0 {
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
	if !vecAsm() || n == 0 {
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
	if !vecAsm() || n == 0 {
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
	if !vecAsm() || n == 0 {
		axpyF16Go(a, x, y)
		return
	}
	axpyF16Asm(n, a, &x[0], &y[0])
	axpyF16Go(a, x[n:], y[n:])
}
