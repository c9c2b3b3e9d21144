//go:build !amd64 && !arm64

package ops

import "ubatch/internal/cpu"

// wantKernels: no path runs assembly off amd64 and arm64.
var wantKernels = []kernelCase{{name: "avx2", path: cpu.AVX2}, {name: "neon", path: cpu.NEON}}
