// Package phi3 is the Phi-3 family (Phi-3, Phi-3.5, Phi-4-mini): a llama block whose Q, K and V
// come from one fused matrix (attn_qkv) and whose gate and up projections are the two halves of
// ffn_up; NEOX rope with LongRoPE's per-pair factors (rope_factors_short/long) where present.
package phi3

import (
	"ubatch/batch"
	"ubatch/model"
	"ubatch/model/llama"
	"ubatch/runner"
)

func init() { model.Register("phi3", Load) }

// Layer is one block's weights.
type Layer struct {
	AttnNorm []float32
	QKV, Wo  runner.Weight // QKV rows: QDim queries, then KVDim keys, then KVDim values
	FFNNorm  []float32
	GateUp   runner.Weight // rows: FFN gate rows, then FFN up rows
	Down     runner.Weight
}

// Model is a loaded Phi-3 model.
type Model struct {
	llama.Base
	Layers []Layer
}

// Load binds a phi3 file's tensors. Of LongRoPE's two factor sets it uses the short one, meant
// for contexts within the original training length (rope.scaling.original_context_length).
func Load(b *model.Binder) (runner.Graph, error) {
	m := &Model{Base: llama.Base{H: b.Hparams()}}
	h := &m.H
	if b.Err() != nil {
		return nil, b.Err()
	}
	dims, base := b.RopeBase(h.HeadDim)
	m.Rope = b.Rope(model.RopeOptions{
		Dims: dims, Base: base, NEOX: true, Scaled: true,
		Factors:    b.Vector("rope_factors_short.weight", dims/2, true),
		AttnFactor: b.Float("rope.scaling.attn_factor", 1, 0, 100),
	})
	m.Bind(b, h)
	m.Layers = model.BindLayers(h.NLayers, func(l *Layer, _ int, p string) {
		l.AttnNorm = b.Vector(p+"attn_norm.weight", h.Dim, false)
		l.QKV = b.Weight(p+"attn_qkv.weight", h.Dim, h.QDim()+2*h.KVDim())
		l.Wo = b.Weight(p+"attn_output.weight", h.QDim(), h.Dim)
		l.FFNNorm = b.Vector(p+"ffn_norm.weight", h.Dim, false)
		l.GateUp = b.Weight(p+"ffn_up.weight", h.Dim, 2*h.FFN)
		l.Down = b.Weight(p+"ffn_down.weight", h.FFN, h.Dim)
	})
	return m, b.Err()
}

func (m *Model) Matrices() []*runner.Weight {
	ws := []*runner.Weight{m.Output}
	for i := range m.Layers {
		l := &m.Layers[i]
		ws = append(ws, &l.QKV, &l.Wo, &l.GateUp, &l.Down)
	}
	return ws
}

func (m *Model) Forward(c *runner.Runtime, _ *batch.UBatch) {
	s, h := &c.S, &m.H
	qd, kvd := h.QDim(), h.KVDim()
	c.Embed(&m.Embd, 1)
	for li := range m.Layers {
		l := &m.Layers[li]
		c.Norm(s.XN, s.X, l.AttnNorm)
		c.MatMul(s.XN, &l.QKV, s.Wide)
		c.Unfuse(s.Wide, qd+2*kvd, 0, s.Q, qd)
		c.Unfuse(s.Wide, qd+2*kvd, qd, s.K, kvd)
		c.Unfuse(s.Wide, qd+2*kvd, qd+kvd, s.V, kvd)
		c.SelfAttention(li, m.Rope, runner.AttnParams{}, &l.Wo)
		c.Add(s.X, s.Tmp, h.Dim)
		c.Norm(s.XN, s.X, l.FFNNorm)
		c.MatMul(s.XN, &l.GateUp, s.Wide)
		c.Unfuse(s.Wide, 2*h.FFN, 0, s.Gate, h.FFN)
		c.Unfuse(s.Wide, 2*h.FFN, h.FFN, s.Up, h.FFN)
		c.GLU(runner.SiLU, s.Gate, s.Up, h.FFN)
		c.MatMul(s.Gate, &l.Down, s.Tmp)
		c.Add(s.X, s.Tmp, h.Dim)
	}
	c.Output(m.OutNorm, m.Output, 0)
}
