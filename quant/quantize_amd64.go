package quant

import "ubatch/internal/cpu"

// AVX2 kernel for quantizing activation rows to Q8_0 (quantize_amd64.s). Its output is
// byte-identical to quantizeQ8_0Go for every input without NaN, because it performs the same
// float32 operations, each exactly rounded: amax as the maximum of the magnitudes (VMAXPS; the
// order does not matter for a maximum), d = amax/127 and id = 1/d with one VDIVSS each (id = 0
// when d == 0), x*id (VMULPS, rounded before the next step, as the Go twin's explicit float32
// conversion guarantees at every GOAMD64 level), + 0.49999997 with x's sign (VADDPS, as roundAway127; the product has
// x's sign whenever it is not NaN), truncation (VCVTTPS2DQ) and clamping to [-128, 127] (the
// signed saturation of VPACKSSDW/VPACKSSWB). Out-of-range and NaN products, which arise when 1/d
// overflows to +Inf for a tiny subnormal d or when the row holds ±Inf, convert to INT32_MIN in
// both: the Go twin's int32(float32) is CVTTSS2SL on amd64, and both then clamp it to -128.
//
// The f16 scale is converted in the assembly with VCVTPS2PH, rounding to nearest even, rather
// than with F32ToF16 in Go, which would need a second pass (or a call) per block with a branchy
// conversion. VCVTPS2PH is the IEEE conversion, which is what F32ToF16 implements, including
// half subnormals (Go runs with MXCSR's flush-to-zero and denormals-are-zero clear) and overflow
// to Inf from 65520 up; d is never negative or NaN. TestF32ToF16AVX2 checks the instruction
// against F32ToF16 on every pattern of the dropped bits for the exponents of the half-subnormal
// range, every mantissa at the overflow threshold and every rounding position elsewhere; a
// one-off run over every float32 from +0 to +Inf agreed as well.
//
// NaN: like the Go twin's a > amax, the kernel's maximum skips NaN elements (see the .s file),
// and a NaN element quantizes to -128 (NaN*id converts to INT32_MIN). The Go twin happens to
// give the same bytes on amd64, but int32 of a NaN is implementation-specific in Go, so only the
// kernel's behaviour is specified and tested.

// quantizeQ8Paths is, by selected path, the path whose Q8_0 quantizer runs: the AVX2 kernel on
// every amd64 path (they build on it), the Go twin on "go".
var quantizeQ8Paths = cpu.Resolve(cpu.AVX2)

//go:noescape
func quantizeQ8_0AVX2Asm(nb int, src *float32, dst *byte)

// quantizeQ8_0AVX2 quantizes the len(src)/32 whole blocks of src into dst, which must hold that
// many Q8_0 blocks (it panics before writing anything otherwise). Call only on an amd64 path.
func quantizeQ8_0AVX2(src []float32, dst []byte) {
	nb := len(src) / 32
	if nb == 0 {
		return
	}
	_ = dst[nb*q8_0Bytes-1] // the assembly writes exactly dst[:nb*q8_0Bytes]
	quantizeQ8_0AVX2Asm(nb, &src[0], &dst[0])
}
