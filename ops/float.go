package ops

import (
	"math"
)

// RMSNorm writes dst[i] = x[i] / sqrt(mean(x²) + eps) * w[i]. All slices have the same length;
// dst may alias x.
func RMSNorm(dst, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	scale := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	w = w[:len(x)]
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = v * scale * w[i]
	}
}

// softmaxGo replaces x with softmax(x); x must be non-empty. It is the pure-Go twin of
// SoftmaxInPlace (act_amd64.go, act_other.go) and its fallback.
func softmaxGo(x []float32) {
	mx := x[0]
	for _, v := range x[1:] {
		mx = max(mx, v)
	}
	var sum float32
	for i, v := range x {
		e := ExpNeg(v - mx)
		x[i] = e
		sum += e
	}
	inv := 1 / sum
	for i := range x {
		x[i] *= inv
	}
}

// swigluGo writes dst[i] = silu(gate[i]) * up[i]; dst may alias gate. It is the pure-Go twin of
// SwiGLU (act_amd64.go, act_other.go) and its fallback.
func swigluGo(dst, gate, up []float32) {
	up = up[:len(gate)]
	dst = dst[:len(gate)]
	for i, g := range gate {
		// sigmoid(g) from e^-|g| <= 1, which ExpNeg computes without math.Exp.
		e := ExpNeg(-abs(g))
		sig := 1 / (1 + e)
		if g < 0 {
			sig = e * sig
		}
		dst[i] = g * sig * up[i]
	}
}

func abs(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// Add writes dst[i] += x[i].
func Add(dst, x []float32) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] += x[i]
	}
}
