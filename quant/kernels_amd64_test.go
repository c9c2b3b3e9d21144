package quant

import (
	"testing"

	"ubatch/internal/cpu"
)

// asmTypes are the weight types whose AVX2 kernels (dot_q8_amd64.go, dot_q32_amd64.go,
// dot_f_amd64.go) kernels_test.go checks; the K-quants' have their own tests in
// dot_k_amd64_test.go.
var asmTypes = []Type{Q4_0, Q8_0, F16, F32, BF16, Q5_0, IQ4_NL, MXFP4, Q4_1, Q5_1}

// asmVariants lists the one amd64 variant.
func asmVariants() []asmVariant {
	skip := ""
	if !cpu.HasAVX2 {
		skip = "CPU lacks AVX2/FMA/F16C/BMI2"
	}
	return []asmVariant{{name: "avx2", skip: skip, kernels: dotKernelsAt(cpu.AVX2)}}
}

// acts128Exact says whether the kernels are exact for Q8_0/Q8_K activation quants of -128, which
// QuantizeAct never writes: the AVX2 ones take the weights' signs onto the activations (VPSIGNB),
// and -(-128) does not fit an int8.
const acts128Exact = false

// requireAsm returns the AVX2 kernel for typ, skipping on CPUs without it.
func requireAsm(t testing.TB, typ Type) DotFunc {
	t.Helper()
	return requireKernel(t, asmVariants()[0], typ)
}
