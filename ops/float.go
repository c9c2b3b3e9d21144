package ops

import (
	"math"
)

// RMSNorm writes dst[i] = x[i] / sqrt(mean(x²) + eps) * w[i]. All slices have the same length;
// dst may alias x.
func RMSNorm(dst, x, w []float32, eps float32) {
	// Four partial sums: one chain of dependent float64 adds was most of the function's time
	// (a row is normalized on one core while the others wait).
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		s0 += float64(v[0]) * float64(v[0])
		s1 += float64(v[1]) * float64(v[1])
		s2 += float64(v[2]) * float64(v[2])
		s3 += float64(v[3]) * float64(v[3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i]) * float64(x[i])
	}
	ss := (s0 + s1) + (s2 + s3)
	scale := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	w = w[:len(x)]
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = v * scale * w[i]
	}
}

// softmaxGo replaces x with softmax(x); x must be non-empty. It is the pure-Go twin of
// SoftmaxInPlace (act_amd64.go, act_other.go) and its fallback.
func softmaxGo(x []float32) { softmaxSinkGo(x, negInf) }

// softmaxSinkGo is the pure-Go twin of SoftmaxSinkInPlace and its fallback.
func softmaxSinkGo(x []float32, sink float32) {
	mx := sink
	for _, v := range x {
		mx = max(mx, v)
	}
	var sum float32
	if sink != negInf { // -Inf - -Inf would be NaN where x is all -Inf
		sum = ExpNeg(sink - mx)
	}
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

// negInf is float32 -Inf: the sink of a softmax without one (e^sink = 0).
var negInf = float32(math.Inf(-1))

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
