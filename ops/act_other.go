//go:build !amd64

package ops

// SwiGLU and SoftmaxInPlace have no assembly here (see kernels_arm64.go).

// SwiGLU writes dst[i] = silu(gate[i]) * up[i]; dst may alias gate.
func SwiGLU(dst, gate, up []float32) { swigluGo(dst, gate, up) }

// SoftmaxInPlace replaces x with softmax(x) and returns nothing; x must be non-empty.
func SoftmaxInPlace(x []float32) { softmaxGo(x) }
