//go:build !amd64

package ops

// actAsm reports whether SwiGLU and SoftmaxInPlace run assembly: never here (arm64 has none for
// them).
func actAsm() bool { return false }

// SwiGLU writes dst[i] = silu(gate[i]) * up[i]; dst may alias gate.
func SwiGLU(dst, gate, up []float32) { swigluGo(dst, gate, up) }

// SoftmaxInPlace replaces x with softmax(x) and returns nothing; x must be non-empty.
func SoftmaxInPlace(x []float32) { softmaxGo(x) }
