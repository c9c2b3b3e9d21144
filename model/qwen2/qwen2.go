// Package qwen2 is the Qwen 2 family (Qwen 2, Qwen 2.5, DeepSeek-R1-Distill-Qwen): a llama
// block with biases on Q, K and V and NEOX rope (the two halves of a head rotate together).
package qwen2

import (
	"ubatch/batch"
	"ubatch/model"
	"ubatch/model/llama"
	"ubatch/runner"
)

func init() { model.Register("qwen2", Load) }

// Model is a loaded qwen2 model: llama's weights plus the Q, K, V biases of every layer.
type Model struct {
	*llama.Model
	Bias []Bias
}

// Bias holds one layer's Q, K and V biases.
type Bias struct{ Q, K, V []float32 }

// Load binds a qwen2 file's tensors.
func Load(b *model.Binder) (runner.Graph, error) {
	g, err := llama.LoadNEOX(b)
	if err != nil {
		return nil, err
	}
	h := &g.H
	bias := BindBias(b, h)
	return &Model{Model: g, Bias: bias}, b.Err()
}

// BindBias binds every layer's attn_{q,k,v}.bias ([QDim], [KVDim], [KVDim]).
func BindBias(b *model.Binder, h *runner.Hparams) []Bias {
	return model.BindLayers(h.NLayers, func(l *Bias, _ int, p string) {
		l.Q = b.Vector(p+"attn_q.bias", h.QDim(), false)
		l.K = b.Vector(p+"attn_k.bias", h.KVDim(), false)
		l.V = b.Vector(p+"attn_v.bias", h.KVDim(), false)
	})
}

// Apply adds the biases to the micro-batch's Q, K and V (Scratch), before the rotation.
func (l *Bias) Apply(c *runner.Runtime) {
	s := &c.S
	c.AddBias(s.Q, l.Q)
	c.AddBias(s.K, l.K)
	c.AddBias(s.V, l.V)
}

func (m *Model) Forward(c *runner.Runtime, _ *batch.UBatch) {
	m.ForwardBlocks(c, func(li int) { m.Bias[li].Apply(c) })
}
