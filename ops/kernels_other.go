//go:build !amd64 && !arm64

package ops

import "ubatch/internal/cpu"

// opKernels is empty off amd64 and arm64: every op runs its Go twin (see kernels.go).
var opKernels [numOps][]cpu.Path
