// Package qwen2 is the Qwen 2 family (Qwen 2, Qwen 2.5, DeepSeek-R1-Distill-Qwen): a llama
// block with biases on Q, K and V and NEOX rope (the two halves of a head rotate together).
package qwen2

import (
	"fmt"

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
	m := &Model{Model: g}
	h := &m.H
	m.Bias = make([]Bias, h.NLayers)
	for i := range m.Bias {
		p := fmt.Sprintf("blk.%d.", i)
		m.Bias[i] = Bias{
			Q: b.Vector(p+"attn_q.bias", h.QDim(), false),
			K: b.Vector(p+"attn_k.bias", h.KVDim(), false),
			V: b.Vector(p+"attn_v.bias", h.KVDim(), false),
		}
	}
	return m, b.Err()
}

func (m *Model) Forward(c *runner.Context, _ *batch.UBatch) {
	s, h := &c.S, &m.H
	c.Embed(&m.Embd, 1)
	for li := range m.Layers {
		l, bias := &m.Layers[li], &m.Bias[li]
		c.Norm(s.XN, s.X, l.AttnNorm)
		c.MatMul3(s.XN, &l.Wq, s.Q, &l.Wk, s.K, &l.Wv, s.V)
		c.AddBias(s.Q, bias.Q)
		c.AddBias(s.K, bias.K)
		c.AddBias(s.V, bias.V)
		m.AttentionBlock(c, li)
		c.Norm(s.XN, s.X, l.FFNNorm)
		c.GatedFFN(runner.SiLU, &l.Gate, &l.Up, &l.Down)
		c.Add(s.X, s.Tmp, h.Dim)
	}
	c.Output(m.OutNorm, m.Output, 0)
}
