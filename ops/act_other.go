//go:build !amd64

package ops

// SwiGLU and SoftmaxInPlace have no assembly here (see kernels_arm64.go).

// SwiGLU writes dst[i] = silu(gate[i]) * up[i]; dst may alias gate.
func SwiGLU(dst, gate, up []float32) { swigluGo(dst, gate, up) }

// SoftmaxInPlace replaces x with softmax(x) and returns nothing; x must be non-empty.
func SoftmaxInPlace(x []float32) { softmaxGo(x) }

// SoftmaxSinkInPlace replaces x with the softmax of x and one more logit, sink, that joins only
// the denominator: x[i] = e^x[i] / (e^sink + Σ_j e^x[j]) (gpt-oss's attention sinks: a head may
// attend to nothing). x must be non-empty; sink -Inf is SoftmaxInPlace.
func SoftmaxSinkInPlace(x []float32, sink float32) { softmaxSinkGo(x, sink) }
