package ops

// SwiGLUOAI writes dst[i] = g·sigmoid(alpha·g)·(u+1) with g = min(gate[i], limit) and u = up[i]
// clamped to [-limit, limit]: gpt-oss's clamped SwiGLU (llama.cpp's swiglu_oai; the model uses
// alpha 1.702, limit 7). The gate is clamped above only, and the +1 lets a zero up pass the gate
// through. dst may alias gate; up must be at least as long as gate. A NaN in gate or up stays
// NaN.
func SwiGLUOAI(dst, gate, up []float32, alpha, limit float32) {
	up = up[:len(gate)]
	dst = dst[:len(gate)]
	for i, g := range gate {
		if g > limit {
			g = limit
		}
		u := up[i]
		if u > limit {
			u = limit
		} else if u < -limit {
			u = -limit
		}
		// sigmoid(a) from e^-|a| <= 1, which ExpNeg computes without math.Exp (as swigluGo).
		a := alpha * g
		e := ExpNeg(-abs(a))
		sig := 1 / (1 + e)
		if a < 0 {
			sig = e * sig
		}
		dst[i] = g * sig * (u + 1)
	}
}
