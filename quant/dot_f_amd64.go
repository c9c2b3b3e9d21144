package quant

import "ubatch/internal/cpu"

// AVX2/FMA kernels for float weights (F32, F16, BF16) dotted with F32 activations. The assembly
// (dot_f_amd64.s) handles the leading multiple of 8 elements: each group of 16 weights is decoded
// once (vcvtph2ps for F16, a zero-extension and shift for BF16) into two registers and fused-
// multiply-added into every column's two accumulators, reading the activations straight from
// memory. The last k%8 elements are added here in Go.

func init() {
	setDot(F32, cpu.AVX2, dotF32AVX2)
	setDot(F16, cpu.AVX2, dotF16AVX2)
	setDot(BF16, cpu.AVX2, dotBF16AVX2)
}

//go:noescape
func dotF32AVX2Asm(n int, w, x *byte, xStride, nx int, out *float32)

//go:noescape
func dotF16AVX2Asm(n int, w, x *byte, xStride, nx int, out *float32)

//go:noescape
func dotBF16AVX2Asm(n int, w, x *byte, xStride, nx int, out *float32)

// dotF32AVX2 is the DotFunc for F32 weights with F32 activations.
func dotF32AVX2(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dotFloatAVX2(dotF32AVX2Asm, F32, k, w, x, xStride, nx, out)
}

// dotF16AVX2 is the DotFunc for F16 weights with F32 activations.
func dotF16AVX2(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dotFloatAVX2(dotF16AVX2Asm, F16, k, w, x, xStride, nx, out)
}

// dotBF16AVX2 is the DotFunc for BF16 weights with F32 activations.
func dotBF16AVX2(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dotFloatAVX2(dotBF16AVX2Asm, BF16, k, w, x, xStride, nx, out)
}

// dotFloatAVX2 is the DotFunc body of the kernels for float weights of type typ (F32, F16 or
// BF16; asm is its kernel above): checks the shape, runs the leading multiple of 8 elements with
// asm and adds the tail in Go.
func dotFloatAVX2(asm func(n int, w, x *byte, xStride, nx int, out *float32), typ Type,
	k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	wb := 2 // bytes a weight
	if typ == F32 {
		wb = 4
	}
	if !checkDotArgs(wb*k, 4*k, w, x, xStride, nx, out) {
		return
	}
	n := k &^ 7
	if n > 0 {
		asm(n, &w[0], &x[0], xStride, nx, &out[0])
	} else {
		clear(out[:nx])
	}
	if n == k {
		return
	}
	if typ != F32 {
		halfTail(typ == BF16, n, k, w, x, xStride, nx, out)
		return
	}
	for j := 0; j < nx; j++ {
		out[j] += dotF32Bytes(w[4*n:4*k], x[j*xStride+4*n:j*xStride+4*k])
	}
}

// halfTail adds elements [n, k) (fewer than 8) of an F16 (or BF16) weight row to each column.
func halfTail(bf16 bool, n, k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	var wf [8]float32
	decodeHalves(bf16, wf[:k-n], w[2*n:2*k])
	for j := 0; j < nx; j++ {
		xs := x[j*xStride+4*n : j*xStride+4*k]
		s := out[j]
		for i := range k - n {
			s += wf[i] * f32At(xs[4*i:])
		}
		out[j] = s
	}
}
