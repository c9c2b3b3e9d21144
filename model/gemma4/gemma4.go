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
//     expert outputs normed apart (post_ffw_norm_1, _2) and summed before post_ffw_norm;
//   - per-layer sizes as llama.cpp reads them: head_count, head_count_kv and
//     feed_forward_length a value or an array of one per layer, the full layers' head size
//     attention.key_length and the sliding ones' key_length_swa (the released models' 512 and
//     256), the KV cache holding each layer's own width (runner.Hparams.KVShapes);
//   - (E2B/E4B) per-layer embeddings (ple.go) and the last attention.shared_kv_layers layers
//     reading the KV of the last earlier layer of their kind instead of their own.
package gemma4

import (
	"fmt"
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
	// The per-layer embedding's gate (inp_gate, [Dim] -> [n_embd_per_layer]), projection back
	// (proj) and its norm (post_norm), when the file has per-layer embeddings.
	InpGate, Proj runner.Weight
	PostNorm      []float32
	dims          layerDims
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
	ones         []float32 // [the widest head] of 1: the values' unweighted norm
	PLE          *PerLayerEmbeddings
}

func load(b *model.Binder) (runner.Graph, error) {
	hp, pl := b.HparamsPerLayer()
	m := &Model{H: hp}
	h := &m.H
	moe := b.Has("expert_count")
	if moe {
		b.ExpertHparams(h)
	}
	fullHD := h.HeadDim
	if last := fmt.Sprintf("blk.%d.attn_norm.weight", h.NLayers-1); b.Err() == nil && !b.HasTensor(last) {
		// Before the per-layer keys, so that a block_count the tensors contradict is named as such.
		b.Fail("tensor %q is missing: not a complete %s GGUF (%s.block_count = %d)", last, b.Arch, b.Arch, h.NLayers)
	}
	sliding := slidingLayers(b, h.NLayers)
	dims := readLayers(b, h, pl, sliding)
	nPL := perLayerInput(b, h)
	if b.Err() != nil {
		return nil, b.Err()
	}
	swaHD := fullHD
	for _, d := range dims {
		if d.Sliding {
			swaHD = d.Attn.HeadDim
		}
	}
	if moe {
		// A MoE layer keeps its dense output and the router's input in Scratch.Wide, [n][2·FFN]:
		// FFN sizes only the scratch here.
		h.FFN = max(h.FFN, h.Dim)
		m.Gating = runner.Gating{Func: runner.SoftmaxTopK, K: h.NExpertsUsed, Norm: true}
	}
	m.embedScale = float32(math.Sqrt(float64(h.Dim)))
	m.ones = make([]float32, max(fullHD, swaHD))
	for i := range m.ones {
		m.ones[i] = 1
	}
	m.FinalSoftcap = b.Float("final_logit_softcapping", 0, 0, 1e6)
	window := b.Int("attention.sliding_window", -1, 1, 1<<24)
	m.Embeddings.Bind(b, h)
	if nPL > 0 {
		m.PLE = bindPLE(b, h, nPL)
	}
	m.Layers = model.BindLayers(h.NLayers, func(l *Layer, i int, p string) {
		l.dims = dims[i]
		m.bindLayer(b, l, p, moe)
	})
	global, local := ropes(b, sliding, fullHD, swaHD)
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

// bindLayer binds block p's tensors with the layer's sizes (l.dims): attention (attn_v
// optional; attn_k, its norm and attn_v unused, and optional, on a layer that shares an
// earlier layer's KV), its norms, the output scale, the dense feed-forward, the per-layer
// embedding's tensors and, for a MoE file, the router and experts.
func (m *Model) bindLayer(b *model.Binder, l *Layer, p string, moe bool) {
	h, a, ffn := &m.H, l.dims.Attn, l.dims.FFN
	l.AttnNorm = b.Vector(p+"attn_norm.weight", h.Dim, false)
	l.Wq = b.Weight(p+"attn_q.weight", h.Dim, a.QDim())
	if !l.dims.Shared || b.HasTensor(p+"attn_k.weight") {
		l.Wk = b.Weight(p+"attn_k.weight", h.Dim, a.KVDim())
		l.KNorm = b.Vector(p+"attn_k_norm.weight", a.HeadDim, l.dims.Shared)
	}
	if l.NoV = !b.HasTensor(p + "attn_v.weight"); !l.NoV {
		l.Wv = b.Weight(p+"attn_v.weight", h.Dim, a.KVDim())
	}
	l.Wo = b.Weight(p+"attn_output.weight", a.QDim(), h.Dim)
	l.QNorm = b.Vector(p+"attn_q_norm.weight", a.HeadDim, false)
	l.PostAttnNorm = b.Vector(p+"post_attention_norm.weight", h.Dim, false)
	l.OutScale = 1
	if s := b.Vector(p+"layer_output_scale.weight", 1, true); s != nil {
		l.OutScale = s[0]
	}
	l.FFNNorm = b.Vector(p+"ffn_norm.weight", h.Dim, false)
	l.Gate = b.Weight(p+"ffn_gate.weight", h.Dim, ffn)
	l.Up = b.Weight(p+"ffn_up.weight", h.Dim, ffn)
	l.Down = b.Weight(p+"ffn_down.weight", ffn, h.Dim)
	l.PostFFNNorm = b.Vector(p+"post_ffw_norm.weight", h.Dim, false)
	if m.PLE != nil {
		l.InpGate = b.Weight(p+"inp_gate.weight", h.Dim, m.PLE.Width)
		l.Proj = b.Weight(p+"proj.weight", m.PLE.Width, h.Dim)
		l.PostNorm = b.Vector(p+"post_norm.weight", h.Dim, false)
	}
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
	if m.PLE != nil {
		ws = append(ws, &m.PLE.ModelProj)
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		ws = append(ws, &l.Wq)
		if !l.dims.Shared {
			ws = append(ws, &l.Wk)
			if !l.NoV {
				ws = append(ws, &l.Wv)
			}
		}
		ws = append(ws, &l.Wo, &l.Gate, &l.Up, &l.Down)
		if l.Experts.Gate != nil {
			ws = l.Experts.AppendMatrices(ws)
		}
		if m.PLE != nil {
			ws = append(ws, &l.InpGate, &l.Proj)
		}
	}
	return ws
}

func (m *Model) Forward(c *runner.Runtime, ub *batch.UBatch) {
	s, h := &c.S, &m.H
	c.Embed(&m.Embd, m.embedScale)
	if m.PLE != nil {
		m.PLE.inputs(c, ub.Tokens)
	}
	for li := range m.Layers {
		l := &m.Layers[li]
		c.Norm(s.XN, s.X, l.AttnNorm)
		m.attention(c, l)
		c.Norm(s.Tmp, s.Tmp, l.PostAttnNorm)
		c.Add(s.X, s.Tmp, h.Dim)
		c.Norm(s.XN, s.X, l.FFNNorm)
		c.GatedFFN(runner.GELU, &l.Gate, &l.Up, &l.Down)
		if l.Experts.Gate != nil {
			m.experts(c, l)
		}
		c.Norm(s.Tmp, s.Tmp, l.PostFFNNorm)
		c.Add(s.X, s.Tmp, h.Dim)
		if m.PLE != nil {
			m.PLE.layer(c, li, &l.InpGate, &l.Proj, l.PostNorm)
		}
		if l.OutScale != 1 {
			for i := range s.X[:c.N()*h.Dim] {
				s.X[i] *= l.OutScale
			}
		}
	}
	c.Output(m.OutNorm, m.Output, m.FinalSoftcap)
}

// attention is layer l's attention from S.XN into S.Tmp: Q (and, on a layer with a KV cache of
// its own, K and V, V being K when there is no attn_v) projected and RMS-normed per head, V
// without a weight, then attended over the layer's KV, or the earlier layer's it shares.
func (m *Model) attention(c *runner.Runtime, l *Layer) {
	s, a, n := &c.S, l.dims.Attn, c.N()
	if l.dims.Shared {
		c.MatMul(s.XN, &l.Wq, s.Q)
		c.NormHeads(s.Q, a.NHeads, l.QNorm)
		c.SharedAttention(l.dims.KV, l.Rope, l.Attn, &l.Wo)
		return
	}
	if l.NoV {
		c.MatMul2(s.XN, &l.Wq, s.Q, &l.Wk, s.K)
		copy(s.V[:n*a.KVDim()], s.K)
	} else {
		c.MatMul3(s.XN, &l.Wq, s.Q, &l.Wk, s.K, &l.Wv, s.V)
	}
	c.NormHeads(s.Q, a.NHeads, l.QNorm)
	c.NormHeads(s.K, a.NKVHeads, l.KNorm)
	c.NormHeads(s.V, a.NKVHeads, m.ones[:a.HeadDim])
	c.SelfAttention(l.dims.KV, l.Rope, l.Attn, &l.Wo)
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
