package ops

import "math"

// GeGLU computes dst[i] = gelu(gate[i]) * up[i] with the tanh approximation of GELU (as ggml and
// Gemma use it). dst may alias gate.
func GeGLU(dst, gate, up []float32) {
	const c = 0.7978845608028654 // sqrt(2/pi)
	up, dst = up[:len(gate)], dst[:len(gate)]
	for i, x := range gate {
		x64 := float64(x)
		g := 0.5 * x64 * (1 + math.Tanh(c*(x64+0.044715*x64*x64*x64)))
		dst[i] = float32(g) * up[i]
	}
}

// Softcap replaces every x with cap * tanh(x / cap): Gemma 2's soft limit on attention scores and
// logits. cap must be positive.
func Softcap(x []float32, cap float32) {
	inv := 1 / float64(cap)
	for i, v := range x {
		x[i] = cap * float32(math.Tanh(float64(v)*inv))
	}
}
