// Package qwen35 is the Qwen 3.5 family (dense, 0.8B-27B): a hybrid of gated delta net layers
// (linear attention with a recurrent state per sequence, runner.DeltaNet) and, every
// full_attention_interval-th layer, gated full attention (a per-head sigmoid output gate carried
// by attn_q, Q and K norms, NEOX rope on the first rope.dimension_count dims of a head). Every
// layer has post_attention_norm before a SwiGLU feed-forward. Multi-token-prediction layers
// (nextn_predict_layers, appended past the trunk) are not run.
package qwen35

import (
	"ubatch/batch"
	"ubatch/model"
	"ubatch/model/llama"
	"ubatch/runner"
)

func init() { model.Register("qwen35", Load) }

// Layer is one block: a delta net (Rec set) or gated attention, then the feed-forward.
type Layer struct {
	AttnNorm, PostNorm []float32
	Rec                *runner.DeltaNet // nil for a full-attention layer
	Index              int              // the layer's recurrent index, or its KV layer index
	Wq                 runner.Weight    // [Dim -> 2·QDim]: per head HeadDim queries, then HeadDim gates
	Wk, Wv, Wo         runner.Weight
	QNorm, KNorm       []float32 // [HeadDim]
	Gate, Up, Down     runner.Weight
}

// Model is a loaded qwen35 model.
type Model struct {
	llama.Base
	Layers []Layer
}

// Load binds a qwen35 file's tensors.
func Load(b *model.Binder) (runner.Graph, error) {
	m := &Model{Base: llama.Base{H: b.Hparams()}}
	h := &m.H
	rec := bindHparams(b, h)
	if b.Err() != nil {
		return nil, b.Err()
	}
	h.Recurrent = rec
	dims, base := b.RopeBase(h.HeadDim)
	checkSections(b, dims)
	// Text positions are the same in every section, so the multi-section rope (IMROPE) is NEOX
	// rope over the first dims elements of a head (llama.cpp's ggml_mrope_cache_init).
	m.Rope = b.Rope(model.RopeOptions{Dims: dims, Base: base, Scaled: true, NEOX: true})
	m.Bind(b, h)
	// At most NLayers, so that layer interval-1 has attention: the KV cache is never empty.
	interval := b.Int("full_attention_interval", 4, 1, h.NLayers)
	if b.Err() != nil {
		return nil, b.Err() // interval is 0 after an error: the layers cannot be told apart
	}
	nRec, nAttn := 0, 0
	m.Layers = model.BindLayers(h.NLayers, func(l *Layer, i int, p string) {
		l.AttnNorm = b.Vector(p+"attn_norm.weight", h.Dim, false)
		l.PostNorm = b.Vector(p+"post_attention_norm.weight", h.Dim, false)
		if (i+1)%interval != 0 {
			l.Rec, l.Index = bindDeltaNet(b, p, h.Dim, rec), nRec
			nRec++
		} else {
			l.bindAttention(b, p, h)
			l.Index = nAttn
			nAttn++
		}
		l.Gate = b.Weight(p+"ffn_gate.weight", h.Dim, h.FFN)
		l.Up = b.Weight(p+"ffn_up.weight", h.Dim, h.FFN)
		l.Down = b.Weight(p+"ffn_down.weight", h.FFN, h.Dim)
	})
	rec.Layers, h.KVLayers = nRec, nAttn
	return m, b.Err()
}

// bindHparams reads the delta nets' sizes and the trunk's layer count (block_count less the
// nextn_predict_layers appended past it), checking that they agree.
func bindHparams(b *model.Binder, h *runner.Hparams) *runner.Recurrent {
	r := &runner.Recurrent{
		ConvKernel: b.Int("ssm.conv_kernel", -1, 2, 64),
		HeadK:      b.Int("ssm.state_size", -1, 1, 1024),
		KHeads:     b.Int("ssm.group_count", -1, 1, 1024),
		VHeads:     b.Int("ssm.time_step_rank", -1, 1, 1024),
	}
	inner := b.Int("ssm.inner_size", -1, 1, 1<<20)
	nextn := b.Int("nextn_predict_layers", 0, 0, max(h.NLayers-1, 0))
	if b.Err() != nil {
		return r
	}
	h.NLayers -= nextn
	switch {
	case r.VHeads%r.KHeads != 0:
		b.Fail("metadata %s.ssm.group_count = %d does not divide ssm.time_step_rank = %d", b.Arch, r.KHeads, r.VHeads)
	case inner%r.VHeads != 0 || inner/r.VHeads != r.HeadK:
		b.Fail("metadata %s.ssm.inner_size = %d is not ssm.time_step_rank (%d) value heads of ssm.state_size (%d): not supported", b.Arch, inner, r.VHeads, r.HeadK)
	case b.Has("attention.recurrent_layers"):
		b.Fail("metadata %s.attention.recurrent_layers is not supported yet (files with full_attention_interval are)", b.Arch)
	}
	r.HeadV = r.HeadK
	return r
}

// checkSections validates rope.dimension_sections (optional): four non-negative counts of
// rotated pairs, at most dims/2 together.
func checkSections(b *model.Binder, dims int) {
	key := b.Arch + ".rope.dimension_sections"
	if _, ok := b.File.Value(key); !ok || b.Err() != nil {
		return
	}
	s, ok := b.File.Int32s(key)
	sum := 0
	for _, v := range s {
		if v < 0 {
			ok = false
		}
		sum += int(v)
	}
	if !ok || len(s) != 4 || sum == 0 || sum > dims/2 {
		b.Fail("metadata %s = %v: want four non-negative counts of rotated pairs summing to at most rope.dimension_count/2 = %d", key, s, dims/2)
	}
}

func bindDeltaNet(b *model.Binder, p string, dim int, r *runner.Recurrent) *runner.DeltaNet {
	ch, vd := r.ConvChannels(), r.ValueDim()
	return &runner.DeltaNet{
		QKV:    b.Weight(p+"attn_qkv.weight", dim, ch),
		Z:      b.Weight(p+"attn_gate.weight", dim, vd),
		Beta:   b.Weight(p+"ssm_beta.weight", dim, r.VHeads),
		Alpha:  b.Weight(p+"ssm_alpha.weight", dim, r.VHeads),
		Out:    b.Weight(p+"ssm_out.weight", vd, dim),
		Conv:   b.Floats(p+"ssm_conv1d.weight", []uint64{uint64(r.ConvKernel), uint64(ch)}, false),
		DtBias: b.Vector(p+"ssm_dt.bias", r.VHeads, false),
		A:      b.Vector(p+"ssm_a", r.VHeads, false),
		Norm:   b.Vector(p+"ssm_norm.weight", r.HeadV, false),
	}
}

func (l *Layer) bindAttention(b *model.Binder, p string, h *runner.Hparams) {
	l.Wq = b.Weight(p+"attn_q.weight", h.Dim, 2*h.QDim())
	l.Wk = b.Weight(p+"attn_k.weight", h.Dim, h.KVDim())
	l.Wv = b.Weight(p+"attn_v.weight", h.Dim, h.KVDim())
	l.Wo = b.Weight(p+"attn_output.weight", h.QDim(), h.Dim)
	l.QNorm = b.Vector(p+"attn_q_norm.weight", h.HeadDim, false)
	l.KNorm = b.Vector(p+"attn_k_norm.weight", h.HeadDim, false)
}

func (m *Model) Matrices() []*runner.Weight {
	ws := []*runner.Weight{m.Output}
	for i := range m.Layers {
		l := &m.Layers[i]
		if l.Rec != nil {
			ws = l.Rec.AppendMatrices(ws)
		} else {
			ws = append(ws, &l.Wq, &l.Wk, &l.Wv, &l.Wo)
		}
		ws = append(ws, &l.Gate, &l.Up, &l.Down)
	}
	return ws
}

func (m *Model) Forward(c *runner.Runtime, _ *batch.UBatch) {
	s, h := &c.S, &m.H
	c.Embed(&m.Embd, 1)
	for li := range m.Layers {
		l := &m.Layers[li]
		c.Norm(s.XN, s.X, l.AttnNorm)
		if l.Rec != nil {
			c.DeltaNetLayer(l.Index, l.Rec)
		} else {
			c.GatedQuery(&l.Wq)
			c.MatMul2(s.XN, &l.Wk, s.K, &l.Wv, s.V)
			c.NormHeads(s.Q, h.NHeads, l.QNorm)
			c.NormHeads(s.K, h.NKVHeads, l.KNorm)
			c.Rope(s.Q, h.NHeads, h.HeadDim, m.Rope)
			c.Rope(s.K, h.NKVHeads, h.HeadDim, m.Rope)
			c.Attention(l.Index, s.Q, s.K, s.V, s.Att, runner.AttnParams{})
			c.OutputGate()
			c.MatMul(s.Att, &l.Wo, s.Tmp)
		}
		c.Add(s.X, s.Tmp, h.Dim)
		c.Norm(s.XN, s.X, l.PostNorm)
		c.GatedFFN(runner.SiLU, &l.Gate, &l.Up, &l.Down)
		c.Add(s.X, s.Tmp, h.Dim)
	}
	c.Output(m.OutNorm, m.Output, 0)
}
