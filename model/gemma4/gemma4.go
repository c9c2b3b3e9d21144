// Package gemma4 is Google's Gemma 4 family (GGUF architecture "gemma4"): Gemma 3's block
// (embeddings scaled by sqrt(dim), per-head Q/K RMSNorm, NEOX rope, a GELU-gated feed-forward,
// RMSNorm after attention and after the feed-forward) with:
//   - attention scores unscaled (the Q/K norms replace 1/sqrt(head size)) and values RMS-normed
//     per head without a weight;
//   - sliding layers marked one by one (attention.sliding_window_pattern, a bool per layer),
//     with their own rope base (rope.freq_base_swa) and rotated width (rope.dimension_count_swa);
//     the full layers' proportional rope as rope_freqs.weight (1e30 for the pairs not rotated);
//   - a learned scalar per layer (layer_output_scale) multiplying the layer's output;
//   - final-logit soft-capping;
//   - (26B-A4B) experts beside the dense feed-forward: the router reads
//     rmsnorm(x)/sqrt(dim)·ffn_gate_inp.scale, a softmax then the top k renormalised, GELU
//     experts (ffn_gate_up_exps fused) scaled each by ffn_down_exps.scale, and the dense and
//     expert outputs normed apart (post_ffw_norm_1, _2) and summed before post_ffw_norm.
//
// Not yet supported, and refused at load with an error naming the key: full layers whose head
// size or KV head count differs from the sliding ones' (the released models' 512 and 256), the
// E-models' per-layer embeddings and KV shared across layers, per-layer FFN widths.
package gemma4

import (
	"math"

	"ubatch/batch"
	"ubatch/model"
	"ubatch/model/gemma"
	"ubatch/model/llama"
	"ubatch/ops"
	"ubatch/runner"
)

func init() { model.Register("gemma4", load) }

// Layer is one block's weights: Gemma 3's (gemma.Layer, its Attn with Scale 1) and Gemma 4's.
type Layer struct {
	gemma.Layer
	OutScale float32 // layer_output_scale
	NoV      bool    // no attn_v: the values are the keys before their norm
	// The mixture of experts, when Experts.Router is bound: the router's input norm (the
	// converter's ffn_gate_inp.scale over sqrt(dim)), the experts' input norm and the norms of
	// the dense and expert outputs.
	Experts                        runner.Experts
	RouterNorm                     []float32
	PreNorm2, PostNorm1, PostNorm2 []float32
}

// Model is a loaded Gemma 4 model; the output is tied to the embedding unless output.weight is
// there.
type Model struct {
	H runner.Hparams
	llama.Embeddings
	Layers       []Layer
	FinalSoftcap float32 // 0: none
	Gating       runner.Gating
	embedScale   float32
	ones         []float32 // [HeadDim] of 1: the values' unweighted norm
	ffn          int       // the dense feed-forward's width (H.FFN may be raised; see load)
}

func load(b *model.Binder) (runner.Graph, error) {
	if err := refuseUnsupported(b); err != nil {
		return nil, err
	}
	m := &Model{H: b.Hparams()}
	h := &m.H
	moe := b.Has("expert_count")
	if moe {
		b.ExpertHparams(h)
	}
	if b.Err() != nil {
		return nil, b.Err()
	}
	m.ffn = h.FFN
	if moe {
		// A MoE layer keeps its dense output and the router's input in Scratch.Wide, [n][2·FFN]:
		// FFN sizes only the scratch here.
		h.FFN = max(h.FFN, h.Dim)
		m.Gating = runner.Gating{Func: runner.SoftmaxTopK, K: h.NExpertsUsed, Norm: true}
	}
	m.embedScale = float32(math.Sqrt(float64(h.Dim)))
	m.ones = make([]float32, h.HeadDim)
	for i := range m.ones {
		m.ones[i] = 1
	}
	m.FinalSoftcap = b.Float("final_logit_softcapping", 0, 0, 1e6)
	window := b.Int("attention.sliding_window", -1, 1, 1<<24)
	m.Embeddings.Bind(b, h)
	m.Layers = model.BindLayers(h.NLayers, func(l *Layer, _ int, p string) { m.bindLayer(b, l, p, moe) })
	// After the tensors, so that a block_count the tensors contradict is named as such.
	sliding := slidingLayers(b, h.NLayers)
	global, local := ropes(b, h, sliding)
	if b.Err() != nil {
		return nil, b.Err()
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		l.Rope, l.Attn = global, runner.AttnParams{Scale: 1}
		if sliding[i] {
			l.Rope, l.Attn.Window = local, int32(window)
		}
	}
	return m, nil
}

// bindLayer binds block p's tensors: attention (attn_v optional), its norms, the output scale,
// the dense feed-forward and, for a MoE file, the router and experts.
func (m *Model) bindLayer(b *model.Binder, l *Layer, p string, moe bool) {
	h := &m.H
	l.AttnNorm = b.Vector(p+"attn_norm.weight", h.Dim, false)
	l.Wq = b.Weight(p+"attn_q.weight", h.Dim, h.QDim())
	l.Wk = b.Weight(p+"attn_k.weight", h.Dim, h.KVDim())
	if l.NoV = !b.HasTensor(p + "attn_v.weight"); !l.NoV {
		l.Wv = b.Weight(p+"attn_v.weight", h.Dim, h.KVDim())
	}
	l.Wo = b.Weight(p+"attn_output.weight", h.QDim(), h.Dim)
	l.QNorm = b.Vector(p+"attn_q_norm.weight", h.HeadDim, false)
	l.KNorm = b.Vector(p+"attn_k_norm.weight", h.HeadDim, false)
	l.PostAttnNorm = b.Vector(p+"post_attention_norm.weight", h.Dim, false)
	l.OutScale = 1
	if s := b.Vector(p+"layer_output_scale.weight", 1, true); s != nil {
		l.OutScale = s[0]
	}
	l.FFNNorm = b.Vector(p+"ffn_norm.weight", h.Dim, false)
	l.Gate = b.Weight(p+"ffn_gate.weight", h.Dim, m.ffn)
	l.Up = b.Weight(p+"ffn_up.weight", h.Dim, m.ffn)
	l.Down = b.Weight(p+"ffn_down.weight", m.ffn, h.Dim)
	l.PostFFNNorm = b.Vector(p+"post_ffw_norm.weight", h.Dim, false)
	if !moe {
		if b.HasTensor(p + "ffn_gate_inp.weight") {
			b.Fail("tensor %q is in a file without %s.expert_count: the metadata and the tensors disagree", p+"ffn_gate_inp.weight", b.Arch)
		}
		return
	}
	b.BindFusedExperts(&l.Experts, p, h)
	l.Experts.DownScale = b.Vector(p+"ffn_down_exps.scale", h.NExperts, true)
	l.RouterNorm = b.Vector(p+"ffn_gate_inp.scale", h.Dim, false)
	for i := range l.RouterNorm {
		l.RouterNorm[i] /= float32(math.Sqrt(float64(h.Dim)))
	}
	l.PreNorm2 = b.Vector(p+"pre_ffw_norm_2.weight", h.Dim, false)
	l.PostNorm1 = b.Vector(p+"post_ffw_norm_1.weight", h.Dim, false)
	l.PostNorm2 = b.Vector(p+"post_ffw_norm_2.weight", h.Dim, false)
}

func (m *Model) Hparams() *runner.Hparams { return &m.H }

func (m *Model) LayerRope(l int) *ops.Rope { return m.Layers[l].Rope }

func (m *Model) Matrices() []*runner.Weight {
	ws := []*runner.Weight{m.Output}
	for i := range m.Layers {
		l := &m.Layers[i]
		ws = append(ws, &l.Wq, &l.Wk)
		if !l.NoV {
			ws = append(ws, &l.Wv)
		}
		ws = append(ws, &l.Wo, &l.Gate, &l.Up, &l.Down)
		if l.Experts.Gate != nil {
			ws = l.Experts.AppendMatrices(ws)
		}
	}
	return ws
}

func (m *Model) Forward(c *runner.Runtime, _ *batch.UBatch) {
	s, h := &c.S, &m.H
	n := c.N()
	c.Embed(&m.Embd, m.embedScale)
	for li := range m.Layers {
		l := &m.Layers[li]
		c.Norm(s.XN, s.X, l.AttnNorm)
		if l.NoV {
			c.MatMul2(s.XN, &l.Wq, s.Q, &l.Wk, s.K)
			copy(s.V[:n*h.KVDim()], s.K)
		} else {
			c.MatMul3(s.XN, &l.Wq, s.Q, &l.Wk, s.K, &l.Wv, s.V)
		}
		c.NormHeads(s.Q, h.NHeads, l.QNorm)
		c.NormHeads(s.K, h.NKVHeads, l.KNorm)
		c.NormHeads(s.V, h.NKVHeads, m.ones)
		c.SelfAttention(li, l.Rope, l.Attn, &l.Wo)
		c.Norm(s.Tmp, s.Tmp, l.PostAttnNorm)
		c.Add(s.X, s.Tmp, h.Dim)
		c.Norm(s.XN, s.X, l.FFNNorm)
		c.GatedFFN(runner.GELU, &l.Gate, &l.Up, &l.Down)
		if l.Experts.Gate != nil {
			m.experts(c, l)
		}
		c.Norm(s.Tmp, s.Tmp, l.PostFFNNorm)
		c.Add(s.X, s.Tmp, h.Dim)
		if l.OutScale != 1 {
			for i := range s.X[:n*h.Dim] {
				s.X[i] *= l.OutScale
			}
		}
	}
	c.Output(m.OutNorm, m.Output, m.FinalSoftcap)
}

// experts adds a MoE layer's experts to the dense feed-forward's output in Tmp: Tmp becomes
// PostNorm1(dense) + PostNorm2(experts(PreNorm2(X)) routed on RouterNorm(X)). The dense output
// and the router's input wait in Scratch.Wide (load made it at least [n][2·Dim]).
func (m *Model) experts(c *runner.Runtime, l *Layer) {
	s, dim, n := &c.S, m.H.Dim, c.N()
	dense, route := s.Wide[:n*dim], s.Wide[n*dim:2*n*dim]
	c.Norm(dense, s.Tmp, l.PostNorm1)
	c.Norm(route, s.X, l.RouterNorm)
	c.Norm(s.XN, s.X, l.PreNorm2)
	c.MoEFFNRouted(&m.Gating, runner.GELU, &l.Experts, route)
	c.Norm(s.Tmp, s.Tmp, l.PostNorm2)
	c.Add(s.Tmp, dense, dim)
}
