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

// Rope holds rotary-embedding constants: theta_i = pos * freqScale * base^(-2i/nDims) for the
// first nDims dimensions of every head (llama rotates all of them). Pairs are adjacent elements
// (x[2i], x[2i+1]): ggml's "normal" rope, used by llama-family GGUF files.
type Rope struct {
	nDims   int
	invFreq []float32 // base^(-2i/nDims) * freqScale, len nDims/2
}

// NewRope prepares a Rope. freqScale is 1/linear-scaling-factor (1 when unscaled).
func NewRope(nDims int, base, freqScale float32) *Rope {
	r := &Rope{nDims: nDims, invFreq: make([]float32, nDims/2)}
	for i := range r.invFreq {
		r.invFreq[i] = float32(math.Pow(float64(base), -2*float64(i)/float64(nDims))) * freqScale
	}
	return r
}

// TableLen is the length of a table filled by Table: a cos and a sin for each rotated pair.
func (r *Rope) TableLen() int { return r.nDims }

// Table fills cs (len TableLen) with cos, sin pairs for position pos, so that the rotation of
// all heads of all layers at that position costs no trigonometry.
func (r *Rope) Table(cs []float32, pos float64) {
	for i, f := range r.invFreq {
		s, c := math.Sincos(pos * float64(f))
		cs[2*i], cs[2*i+1] = float32(c), float32(s)
	}
}

// Apply rotates every head of x (a multiple of headDim values, head-major) with the table cs.
func (r *Rope) Apply(x []float32, headDim int, cs []float32) {
	cs = cs[:r.nDims]
	for h := 0; h+headDim <= len(x); h += headDim {
		head := x[h : h+r.nDims]
		for i := 0; i < len(cs); i += 2 {
			c, s := cs[i], cs[i+1]
			a, b := head[i], head[i+1]
			head[i] = a*c - b*s
			head[i+1] = a*s + b*c
		}
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
