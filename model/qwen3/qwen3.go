// Package qwen3 is the Qwen 3 family (dense): a llama block with NEOX rope, per-head RMSNorm on
// Q and K before the rotation, and a head size from attention.key_length that need not be
// embedding_length / head_count.
package qwen3

import (
	"fmt"

	"ubatch/batch"
	"ubatch/model"
	"ubatch/model/llama"
	"ubatch/runner"
)

func init() { model.Register("qwen3", Load) }

// Model is a loaded qwen3 model: llama's weights plus the per-head Q and K norms of every layer.
type Model struct {
	*llama.Model
	QNorm, KNorm [][]float32 // [layer][HeadDim]
}

// Load binds a qwen3 file's tensors.
func Load(b *model.Binder) (runner.Graph, error) {
	g, err := llama.LoadNEOX(b)
	if err != nil {
		return nil, err
	}
	m := &Model{Model: g}
	h := &m.H
	for i := range h.NLayers {
		p := fmt.Sprintf("blk.%d.", i)
		m.QNorm = append(m.QNorm, b.Vector(p+"attn_q_norm.weight", h.HeadDim, false))
		m.KNorm = append(m.KNorm, b.Vector(p+"attn_k_norm.weight", h.HeadDim, false))
	}
	return m, b.Err()
}

func (m *Model) Forward(c *runner.Runtime, _ *batch.UBatch) {
	s, h := &c.S, &m.H
	m.ForwardBlocks(c, func(li int) {
		c.NormHeads(s.Q, h.NHeads, m.QNorm[li])
		c.NormHeads(s.K, h.NKVHeads, m.KNorm[li])
	})
}
