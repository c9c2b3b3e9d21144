package runner

import (
	"fmt"

	"ubatch/ops"
)

// A mixture-of-experts feed-forward replaces the dense one with E experts (each a gated
// feed-forward of its own) and a router that picks K of them per token. Here the micro-batch's
// tokens, from every sequence in it, are grouped by expert (expertGroups), so that each expert's
// weights are read once per micro-batch and multiplied by all of its tokens' columns at once,
// the form of continuous batching that suits experts.

// GatingFunc is how router logits become the chosen experts' weights.
type GatingFunc uint8

const (
	// SoftmaxTopK is a softmax over all experts, then the K most probable (Qwen3-MoE, Mixtral).
	SoftmaxTopK GatingFunc = iota
	// TopKSoftmax is the K largest logits, then a softmax over those K (gpt-oss).
	TopKSoftmax
)

// Gating is a family's routing rule.
type Gating struct {
	Func GatingFunc
	K    int  // experts used per token (expert_used_count), 1 <= K <= the expert count
	Norm bool // SoftmaxTopK: renormalise the K chosen probabilities to sum to 1 (Qwen3-MoE)
	// Scale multiplies every chosen weight (llama.cpp's expert_weights_scale); 0 means 1.
	Scale float32
}

// Route chooses one token's experts from its router logits (len E, overwritten: the softmax's
// scratch) plus bias (nil or len E, added first): afterwards order[:K] are the chosen experts,
// most weighty first, and w[:K] their weights. order must have len E (any contents) and w at
// least K. Ties go to the lower expert; a NaN logit is never preferred to a number.
func (g *Gating) Route(logits, bias []float32, order []int32, w []float32) {
	if bias != nil {
		ops.Add(logits, bias)
	}
	if g.Func == SoftmaxTopK {
		ops.SoftmaxInPlace(logits)
	}
	for e := range order {
		order[e] = int32(e)
	}
	k := g.K
	// Partial selection sort: K passes over E, no scratch beyond order (K is small).
	for j := range k {
		best := j
		for i := j + 1; i < len(order); i++ {
			v, b := logits[order[i]], logits[order[best]]
			if v > b || (v == b && order[i] < order[best]) || (b != b && v == v) { // b != b: NaN
				best = i
			}
		}
		order[j], order[best] = order[best], order[j]
		w[j] = logits[order[j]]
	}
	w = w[:k]
	switch {
	case g.Func == TopKSoftmax:
		ops.SoftmaxInPlace(w)
	case g.Norm:
		var sum float32
		for _, v := range w {
			sum += v
		}
		if sum > 0 {
			for j := range w {
				w[j] /= sum
			}
		}
	}
	if g.Scale != 0 && g.Scale != 1 {
		for j := range w {
			w[j] *= g.Scale
		}
	}
}

// expertGroups are a micro-batch's tokens grouped by expert: expert e's routed tokens are
// tok[off[e]:off[e+1]], in token order, with their gate weights in w at the same indices.
type expertGroups struct {
	off []int32   // [E+1]
	tok []int32   // [n·K] token indices within the micro-batch
	w   []float32 // [n·K]
}

func newExpertGroups(experts, entries int) expertGroups {
	return expertGroups{off: make([]int32, experts+1), tok: make([]int32, entries), w: make([]float32, entries)}
}

// group fills g from the router's choices: ids and w are [n][k] (token i's j-th expert, in
// [0, experts), and its weight), as Route leaves them. A counting sort: stable, so each expert's
// tokens stay in token order, and a token's sum over its experts is in expert order whatever
// else is in the micro-batch. g must hold experts+1 offsets and len(ids) entries.
func (g *expertGroups) group(ids []int32, w []float32, k, experts int) {
	off := g.off[:experts+1]
	clear(off)
	for _, e := range ids {
		off[e+1]++
	}
	for e := range experts {
		off[e+1] += off[e]
	}
	// off[e] is expert e's next free entry; after the fill it has moved to off[e+1]'s value.
	for i, e := range ids {
		p := off[e]
		g.tok[p], g.w[p] = int32(i/k), w[i]
		off[e]++
	}
	copy(off[1:], off[:experts])
	off[0] = 0
}

// Experts are one layer's mixture-of-experts weights, as llama.cpp stores them. Router
// (ffn_gate_inp) has one row of Dim per expert and is usually F32 (the quantizer leaves it);
// Gate[e], Up[e] (ExpertFFN rows of Dim) and Down[e] (Dim rows of ExpertFFN) are expert e's
// slices of the stacked ffn_{gate,up,down}_exps tensors, views of the file's bytes (see
// ExpertViews). The biases are nil where the family has none (gpt-oss has them all):
// RouterBias [E], GateBias and UpBias [E][ExpertFFN], DownBias [E][Dim], row-major.
type Experts struct {
	Router                     Weight
	RouterBias                 []float32
	Gate, Up, Down             []Weight
	GateBias, UpBias, DownBias []float32
	// DownScale [E], when not nil, multiplies expert e's output (Gemma 4's ffn_down_exps.scale).
	DownScale []float32
}

// AppendMatrices appends the router's and every expert's matrices to ws (Graph.Matrices).
func (x *Experts) AppendMatrices(ws []*Weight) []*Weight {
	ws = append(ws, &x.Router)
	for e := range x.Gate {
		ws = append(ws, &x.Gate[e], &x.Up[e], &x.Down[e])
	}
	return ws
}

// ExpertViews splits a stacked expert tensor of n experts (GGUF dims [cols, rows, n], data
// holding n·rows rows of cols elements of t) into n Weights of rows x cols that share its bytes.
func ExpertViews(name string, t Weight, n int) ([]Weight, error) {
	if n <= 0 || t.Rows%n != 0 {
		return nil, fmt.Errorf("tensor %q: %d rows are not %d experts' matrices", name, t.Rows, n)
	}
	rows := t.Rows / n
	size := rows * t.RowBytes()
	out := make([]Weight, n)
	for e := range out {
		w, err := NewWeight(fmt.Sprintf("%s[%d]", name, e), t.Type, rows, t.Cols, t.Data[e*size:(e+1)*size:(e+1)*size])
		if err != nil {
			return nil, err
		}
		out[e] = w
	}
	return out, nil
}

// moeScratch holds MoEFFN's buffers, sized once by New for NUBatch tokens.
type moeScratch struct {
	logits   []float32 // [n][E] router logits, then probabilities
	order    []int32   // [E] Route's selection
	ids      []int32   // [n][K] chosen experts
	w        []float32 // [n][K] their weights
	groups   expertGroups
	x, y     []float32 // [n][Dim] one expert's gathered inputs and its outputs
	gate, up []float32 // [n][ExpertFFN]
	// Counts for ubatch bench: expert layers computed and the experts that had tokens in them.
	layers, read int64
}

func newMoEScratch(h *Hparams, n int) moeScratch {
	e, k := h.NExperts, h.NExpertsUsed
	return moeScratch{
		logits: make([]float32, n*e), order: make([]int32, e), ids: make([]int32, n*k), w: make([]float32, n*k),
		groups: newExpertGroups(e, n*k),
		x:      make([]float32, n*h.Dim), y: make([]float32, n*h.Dim),
		gate: make([]float32, n*h.ExpertFFN), up: make([]float32, n*h.ExpertFFN),
	}
}

// ExpertsRead reports the mixture-of-experts layers computed since the Runtime was made (one per
// layer per micro-batch) and the experts that had tokens in them, summed: read/layers is the
// mean number of distinct experts whose weights a step reads per layer.
func (c *Runtime) ExpertsRead() (layers, read int64) { return c.moe.layers, c.moe.read }

// MoEFFN computes Tmp from XN with the mixture-of-experts feed-forward x: for every token the
// router's logits pick g.K experts (g.Route), and Tmp is the sum over them of weight ·
// down_e(act(gate_e(XN)) · up_e(XN)) (plus the experts' biases where x has them). The tokens
// are grouped by expert first and each expert multiplies all of its tokens at once; the
// products are parallel over rows within each expert's matrices, as the dense ones are. x has
// Hparams.NExperts experts of Hparams.ExpertFFN and g.K is at most NExpertsUsed (the loader's
// checks); both are fixed when the Runtime is made.
func (c *Runtime) MoEFFN(g *Gating, act Activation, x *Experts) { c.MoEFFNRouted(g, act, x, c.S.XN) }

// MoEFFNRouted is MoEFFN with the router reading in ([n][Dim]) instead of XN: Gemma 4 routes on
// a differently normed copy of the residual than the one the experts read.
func (c *Runtime) MoEFFNRouted(g *Gating, act Activation, x *Experts, in []float32) {
	h, ms, n := c.h, &c.moe, c.n
	ne, k, dim, ffn := len(x.Gate), g.K, h.Dim, h.ExpertFFN
	if ne != h.NExperts || k < 1 || k > h.NExpertsUsed || k > ne {
		panic(fmt.Sprintf("runner: %d experts, %d used, for a Runtime sized for %d and %d", ne, k, h.NExperts, h.NExpertsUsed))
	}
	c.MatMul(in, &x.Router, ms.logits)
	for i := range n {
		g.Route(ms.logits[i*ne:(i+1)*ne], x.RouterBias, ms.order, ms.w[i*k:(i+1)*k])
		copy(ms.ids[i*k:(i+1)*k], ms.order[:k])
	}
	gr := &ms.groups
	gr.group(ms.ids[:n*k], ms.w[:n*k], k, ne)
	out := c.S.Tmp[:n*dim]
	clear(out)
	ms.layers++
	for e := range ne {
		lo, hi := int(gr.off[e]), int(gr.off[e+1])
		m := hi - lo
		if m == 0 {
			continue
		}
		ms.read++
		for j, t := range gr.tok[lo:hi] {
			copy(ms.x[j*dim:(j+1)*dim], c.S.XN[int(t)*dim:(int(t)+1)*dim])
		}
		c.mm.jobs[0], c.mm.jobs[1] = mmJob{w: &x.Gate[e], out: ms.gate}, mmJob{w: &x.Up[e], out: ms.up}
		c.matmul(ms.x, 2, m)
		if x.GateBias != nil {
			addRows(ms.gate, x.GateBias[e*ffn:(e+1)*ffn], m)
			addRows(ms.up, x.UpBias[e*ffn:(e+1)*ffn], m)
		}
		c.glu(act, ms.gate, ms.up, m*ffn)
		c.mm.jobs[0] = mmJob{w: &x.Down[e], out: ms.y}
		c.matmul(ms.gate, 1, m)
		if x.DownBias != nil {
			addRows(ms.y, x.DownBias[e*dim:(e+1)*dim], m)
		}
		scale := float32(1)
		if x.DownScale != nil {
			scale = x.DownScale[e]
		}
		for j, t := range gr.tok[lo:hi] {
			axpy(out[int(t)*dim:(int(t)+1)*dim], scale*gr.w[lo+j], ms.y[j*dim:(j+1)*dim])
		}
	}
}

// addRows adds b to the first m rows of x (rows of len(b)).
func addRows(x, b []float32, m int) {
	for i := range m {
		ops.Add(x[i*len(b):(i+1)*len(b)], b)
	}
}

// axpy adds a·x to dst.
func axpy(dst []float32, a float32, x []float32) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] += a * x[i]
	}
}
