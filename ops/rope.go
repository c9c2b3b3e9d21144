package ops

import (
	"fmt"
	"math"
)

// RopeConfig describes a rotary position embedding as GGUF files declare it.
type RopeConfig struct {
	Dims      int     // rotated dimensions at the start of every head (even)
	Base      float32 // theta base
	FreqScale float32 // 1/scaling factor for linear and YaRN scaling; 0 means 1
	// NEOX pairs element i with i+Dims/2 (GPT-NeoX, Qwen, Gemma, Phi-3); otherwise pairs are
	// adjacent elements (2i, 2i+1), ggml's "normal" rope used by llama-family files.
	NEOX bool
	// Factors, when set (len Dims/2), divide pair i's frequency: Llama 3.1's rope_freqs.weight,
	// Phi-3's rope_factors_short/long.
	Factors []float32
	// AttnFactor scales every cos and sin (1 when 0): YaRN's and Phi-3's attention factor.
	AttnFactor float32
	// YaRN mixes interpolated and extrapolated frequencies per pair (ggml's rope_yarn) when
	// OrigCtx > 0: the context the model was trained with before scaling.
	YaRN               bool
	OrigCtx            int
	BetaFast, BetaSlow float32 // 0 means llama.cpp's defaults 32 and 1
}

// Rope holds rotary-embedding constants: pair i of every head at position p is rotated by
// p * theta_i, with theta_i = freqScale * base^(-2i/Dims) / factor_i (mixed with the unscaled
// frequency for YaRN).
type Rope struct {
	nDims  int
	neox   bool
	interp []float32 // scaled frequency of pair i
	extrap []float32 // unscaled frequency (YaRN only)
	mix    []float32 // YaRN ramp: weight of extrap for pair i (nil: no mixing)
	mscale float32
}

// NewRope checks c and prepares its constants.
func NewRope(c RopeConfig) (*Rope, error) {
	if c.Dims <= 0 || c.Dims%2 != 0 {
		return nil, fmt.Errorf("rope: %d rotated dimensions (want a positive even number)", c.Dims)
	}
	if !(c.Base > 0) || math.IsInf(float64(c.Base), 0) {
		return nil, fmt.Errorf("rope: freq_base %g is not a positive number", c.Base)
	}
	if c.FreqScale == 0 {
		c.FreqScale = 1
	}
	if c.AttnFactor == 0 {
		c.AttnFactor = 1
	}
	if !(c.FreqScale > 0) || !(c.AttnFactor > 0) {
		return nil, fmt.Errorf("rope: freq scale %g and attention factor %g must be positive", c.FreqScale, c.AttnFactor)
	}
	half := c.Dims / 2
	if c.Factors != nil && len(c.Factors) != half {
		return nil, fmt.Errorf("rope: %d frequency factors for %d rotated pairs", len(c.Factors), half)
	}
	r := &Rope{nDims: c.Dims, neox: c.NEOX, interp: make([]float32, half), mscale: c.AttnFactor}
	ext := make([]float32, half)
	for i := range half {
		f := math.Pow(float64(c.Base), -2*float64(i)/float64(c.Dims))
		if c.Factors != nil {
			if !(c.Factors[i] > 0) {
				return nil, fmt.Errorf("rope: frequency factor %d is %g, not positive", i, c.Factors[i])
			}
			f /= float64(c.Factors[i])
		}
		ext[i] = float32(f)
		r.interp[i] = float32(f * float64(c.FreqScale))
	}
	if c.YaRN && c.OrigCtx > 0 && c.FreqScale != 1 {
		r.extrap, r.mix = ext, yarnRamp(c)
		r.mscale *= float32(1 + 0.1*math.Log(1/float64(c.FreqScale)))
	}
	return r, nil
}

// yarnRamp is, per pair, how much of the unscaled frequency YaRN keeps: 1 for the fast pairs
// (more than BetaFast rotations over OrigCtx), 0 for the slow ones (fewer than BetaSlow), a
// linear ramp between, as ggml's rope_yarn_corr_dims and rope_yarn_ramp compute it.
func yarnRamp(c RopeConfig) []float32 {
	if c.BetaFast == 0 {
		c.BetaFast = 32
	}
	if c.BetaSlow == 0 {
		c.BetaSlow = 1
	}
	corr := func(rot float32) float64 {
		return float64(c.Dims) * math.Log(float64(c.OrigCtx)/(float64(rot)*2*math.Pi)) / (2 * math.Log(float64(c.Base)))
	}
	lo := max(0, math.Floor(corr(c.BetaFast)))
	hi := min(float64(c.Dims-1), math.Ceil(corr(c.BetaSlow)))
	mix := make([]float32, c.Dims/2)
	for i := range mix {
		y := (float64(i) - lo) / max(0.001, hi-lo)
		mix[i] = float32(1 - min(1, max(0, y)))
	}
	return mix
}

// TableLen is the length of a table filled by Table: a cos and a sin for each rotated pair.
func (r *Rope) TableLen() int { return r.nDims }

// Table fills cs (len TableLen) with cos, sin pairs for position pos, so that the rotation of
// all heads of all layers at that position costs no trigonometry.
func (r *Rope) Table(cs []float32, pos float64) {
	for i, f := range r.interp {
		theta := pos * float64(f)
		if r.mix != nil {
			m := float64(r.mix[i])
			theta = theta*(1-m) + pos*float64(r.extrap[i])*m
		}
		s, c := math.Sincos(theta)
		cs[2*i], cs[2*i+1] = float32(c)*r.mscale, float32(s)*r.mscale
	}
}

// ShiftTable fills cs like Table for a rotation by delta positions without the attention factor:
// for moving cached keys, which had that factor applied once already.
func (r *Rope) ShiftTable(cs []float32, delta float64) {
	m := r.mscale
	r.mscale = 1
	r.Table(cs, delta)
	r.mscale = m
}

// Apply rotates every head of x (a multiple of headDim values, head-major) with the table cs.
func (r *Rope) Apply(x []float32, headDim int, cs []float32) {
	cs = cs[:r.nDims]
	half := r.nDims / 2
	for h := 0; h+headDim <= len(x); h += headDim {
		head := x[h : h+r.nDims]
		if r.neox {
			lo, hi := head[:half], head[half:]
			for i := range lo {
				c, s := cs[2*i], cs[2*i+1]
				a, b := lo[i], hi[i]
				lo[i] = a*c - b*s
				hi[i] = a*s + b*c
			}
			continue
		}
		for i := 0; i < len(cs); i += 2 {
			c, s := cs[i], cs[i+1]
			a, b := head[i], head[i+1]
			head[i] = a*c - b*s
			head[i+1] = a*s + b*c
		}
	}
}
