package ops

import "ubatch/quant"

// Vector kernels used by attention over the KV cache. DotF32, DotF16, AxpyF32 and AxpyF16 use
// assembly on amd64 (AVX2/FMA/F16C) and arm64 (NEON) (vec_asm.go), elsewhere the pure-Go
// functions below (vec_other.go). The Go versions are also the reference the assembly is tested
// against.

// dotF32Go returns Σ x[i]·y[i] over len(x) elements; len(y) >= len(x).
func dotF32Go(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(x); i++ {
		s0 += x[i] * y[i]
	}
	return s0 + s1 + s2 + s3
}

// dotF16Go returns Σ x[i]·half(y[i]) over len(x) elements; len(y) >= len(x).
func dotF16Go(x []float32, y []uint16) float32 {
	y = y[:len(x)]
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(x); i += 2 {
		s0 += x[i] * quant.F16ToF32(y[i])
		s1 += x[i+1] * quant.F16ToF32(y[i+1])
	}
	for ; i < len(x); i++ {
		s0 += x[i] * quant.F16ToF32(y[i])
	}
	return s0 + s1
}

// axpyF32Go computes y[i] += a·x[i] over len(y) elements.
func axpyF32Go(a float32, x, y []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// axpyF16Go computes y[i] += a·half(x[i]) over len(y) elements.
func axpyF16Go(a float32, x []uint16, y []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * quant.F16ToF32(x[i])
	}
}
