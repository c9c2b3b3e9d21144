package quant

import (
	"fmt"
	"testing"

	"ubatch/internal/cpu"
)

// asmTypes are the weight types with NEON kernels (dot_q8_arm64.go, dot_q4k_arm64.go,
// dot_q5k_arm64.go, dot_q6k_arm64.go, dot_k23_arm64.go, dot_f_arm64.go), which kernels_test.go
// checks.
var asmTypes = []Type{Q4_0, Q8_0, Q5_0, IQ4_NL, MXFP4, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, F32, F16, BF16}

// asmVariants lists the arm64 variants, in the order of preference: every ARMv8 CPU runs "neon";
// "neon-dp" needs the dot-product extension (under qemu-user run with QEMU_CPU=max).
func asmVariants() []asmVariant {
	dp := ""
	if !cpu.HasDotProd {
		dp = "CPU lacks the dot-product extension (ASIMDDP); under qemu-user set QEMU_CPU=max"
	}
	return []asmVariant{
		{name: "neon", kernels: dotKernelsAt(cpu.NEON)},
		{name: "neon-dp", skip: dp, kernels: dotKernelsAt(cpu.NEONDP)},
	}
}

// acts128Exact says whether the kernels are exact for Q8_0/Q8_K activation quants of -128 (never
// written by QuantizeAct): the NEON ones multiply signed int8 by signed int8.
const acts128Exact = true

// The fuzz targets of the K-quant kernels (on amd64, dot_k_amd64_test.go has its own).
func FuzzDotIQ4_XS(f *testing.F) { fuzzKernel(f, IQ4_XS) }
func FuzzDotQ2_K(f *testing.F)   { fuzzKernel(f, Q2_K) }
func FuzzDotQ3_K(f *testing.F)   { fuzzKernel(f, Q3_K) }
func FuzzDotQ4_K(f *testing.F)   { fuzzKernel(f, Q4_K) }
func FuzzDotQ5_K(f *testing.F)   { fuzzKernel(f, Q5_K) }
func FuzzDotQ6_K(f *testing.F)   { fuzzKernel(f, Q6_K) }

// BenchmarkNEONDot measures each NEON variant on one 4096-element weight row, like BenchmarkDot
// does the Go twins; MB/s is weight bytes per second (per call, whatever the column count).
// Under qemu-user the figures only show relative sanity, not the speed of real hardware.
func BenchmarkNEONDot(b *testing.B) {
	const k = 4096
	for _, v := range asmVariants() {
		for _, typ := range asmTypes {
			for _, nx := range []int{1, MaxCols} {
				b.Run(fmt.Sprintf("%s/%v/cols=%d", v.name, typ, nx), func(b *testing.B) {
					dot := requireKernel(b, v, typ)
					f := newMatmulFixture(b, typ, k, 1, nx)
					var out [MaxCols]float32
					b.SetBytes(int64(f.rowBytes))
					b.ReportAllocs()
					for b.Loop() {
						dot(k, f.w, f.xq, f.xRow, nx, out[:])
					}
				})
			}
		}
	}
}
