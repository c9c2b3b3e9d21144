package quant

import "golang.org/x/sys/cpu"

// asmKernels holds the assembly DotFuncs usable on this CPU. Files for each architecture fill
// it from init functions after checking CPU features (package-level variables are initialised
// before any init runs); it is read-only afterwards.
var asmKernels = map[Type]DotFunc{}

// Kernel returns the fastest DotFunc for weight type t on this machine: an assembly kernel when
// the CPU supports one, else the pure-Go twin from DotGo. nil if t is unsupported.
func Kernel(t Type) DotFunc {
	if k := asmKernels[t]; k != nil {
		return k
	}
	return DotGo(t)
}

// asmName names the instruction set of asmKernels; the arm64 init replaces it with the NEON
// variant it registered ("neon" or "neon-dp").
var asmName = "avx2"

// KernelName says which implementation Kernel(t) returns ("avx2", "neon", "neon-dp" or "go"),
// for logs and benchmarks.
func KernelName(t Type) string {
	if asmKernels[t] != nil {
		return asmName
	}
	return "go"
}

// hasAVX2 reports whether the CPU has everything the amd64 kernels use: AVX2, FMA and F16C
// (always false on other architectures, whose builds carry no assembly).
var hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C && cpu.X86.HasBMI2

// checkDotArgs panics with an index error unless w holds rowBytes bytes, each of the nx columns
// x[j*xStride:] holds xRow bytes and out holds nx floats, or if nx > MaxCols; the assembly reads
// exactly these ranges, so this is what keeps it in bounds. It reports whether there is anything
// to compute (nx >= 1; like the Go twins, nx <= 0 computes nothing).
func checkDotArgs(rowBytes, xRow int, w, x []byte, xStride, nx int, out []float32) bool {
	if nx > MaxCols {
		var cols [MaxCols]float32
		_ = cols[nx-1] // index error, like the Go twins' accumulator arrays
	}
	// Indexes, not slice expressions: slicing may run up to the capacity.
	if rowBytes > 0 {
		_ = w[rowBytes-1]
	}
	if nx < 1 {
		return false
	}
	_ = out[nx-1]
	if xRow > 0 {
		for j := 0; j < nx; j++ {
			_ = x[j*xStride]
			_ = x[j*xStride+xRow-1]
		}
	}
	return true
}
