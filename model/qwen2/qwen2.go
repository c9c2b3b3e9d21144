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
	bias := model.BindLayers(h.NLayers, func(l *Bias, _ int, p string) {
		l.Q = b.Vector(p+"attn_q.bias", h.QDim(), false)
		l.K = b.Vector(p+"attn_k.bias", h.KVDim(), false)
		l.V = b.Vector(p+"attn_v.bias", h.KVDim(), false)
	})
	return &Model{Model: g, Bias: bias}, b.Err()
}

func (m *Model) Forward(c *runner.Runtime, _ *batch.UBatch) {
	s := &c.S
	m.ForwardBlocks(c, func(li int) {
		c.AddBias(s.Q, m.Bias[li].Q)
		c.AddBias(s.K, m.Bias[li].K)
		c.AddBias(s.V, m.Bias[li].V)
	})
}
