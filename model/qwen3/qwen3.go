// Package qwen3 is the Qwen 3 family (dense): a llama block with NEOX rope, per-head RMSNorm on
// Q and K before the rotation, and a head size from attention.key_length that need not be
// embedding_length / head_count.
package qwen3

import (
	"ubatch/batch"
	"ubatch/model"
	"ubatch/model/llama"
	"ubatch/runner"
)

func init() { model.Register("qwen3", Load) }

// Model is a loaded qwen3 model: llama's weights plus the per-head Q and K norms of every layer.
type Model struct {
	*llama.Model
	Norm []Norm
}

// Norm holds one layer's per-head Q and K norm weights, HeadDim each.
type Norm struct{ Q, K []float32 }

// Load binds a qwen3 file's tensors.
func Load(b *model.Binder) (runner.Graph, error) {
	g, err := llama.LoadNEOX(b)
	if err != nil {
		return nil, err
	}
	return &Model{Model: g, Norm: BindNorms(b, &g.H)}, b.Err()
}

// BindNorms binds every layer's attn_q_norm and attn_k_norm (HeadDim each): qwen3's attention,
// which Qwen3-MoE shares.
func BindNorms(b *model.Binder, h *runner.Hparams) []Norm {
	return model.BindLayers(h.NLayers, func(l *Norm, _ int, p string) {
		l.Q = b.Vector(p+"attn_q_norm.weight", h.HeadDim, false)
		l.K = b.Vector(p+"attn_k_norm.weight", h.HeadDim, false)
	})
}

// Apply normalises every head of the micro-batch's Q and K (in Scratch) with the norm weights.
func (n *Norm) Apply(c *runner.Runtime) {
	h := c.Hparams()
	c.NormHeads(c.S.Q, h.NHeads, n.Q)
	c.NormHeads(c.S.K, h.NKVHeads, n.K)
}

func (m *Model) Forward(c *runner.Runtime, _ *batch.UBatch) {
	m.ForwardBlocks(c, func(li int) { m.Norm[li].Apply(c) })
}
