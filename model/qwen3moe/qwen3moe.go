// Package qwen3moe is the Qwen 3 mixture-of-experts family (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B,
// Qwen3-235B-A22B): qwen3's attention (NEOX rope, per-head Q and K norms) and in every layer,
// instead of the dense feed-forward, expert_count SwiGLU experts of which a router picks
// expert_used_count per token: softmax over all experts, the top k, their weights renormalised
// to sum to 1 (llama.cpp's build_moe_ffn with norm_w).
package qwen3moe

import (
	"ubatch/batch"
	"ubatch/model"
	"ubatch/model/llama"
	"ubatch/model/qwen3"
	"ubatch/runner"
)

func init() { model.Register("qwen3moe", Load) }

// Model is a loaded qwen3moe model: llama's attention weights and embeddings, qwen3's Q and K
// norms, and every layer's experts.
type Model struct {
	*llama.Model
	Norm    []qwen3.Norm
	Experts []runner.Experts
	Gating  runner.Gating
}

// Load binds a qwen3moe file's tensors: per layer ffn_gate_inp [Dim -> E] and the stacked
// ffn_{gate,up}_exps [E x Dim -> ExpertFFN] and ffn_down_exps [E x ExpertFFN -> Dim].
func Load(b *model.Binder) (runner.Graph, error) {
	g, err := llama.LoadNEOXExperts(b)
	if err != nil {
		return nil, err
	}
	h := &g.H
	m := &Model{Model: g, Norm: qwen3.BindNorms(b, h)}
	b.ExpertHparams(h)
	if b.Err() != nil {
		return nil, b.Err()
	}
	// No layer has a dense feed-forward (feed_forward_length, 6144 in Qwen3-30B-A3B, sizes
	// nothing): the runner's FFN scratch need only hold an expert's.
	h.FFN = h.ExpertFFN
	m.Gating = runner.Gating{Func: runner.SoftmaxTopK, K: h.NExpertsUsed, Norm: true}
	m.Experts = model.BindLayers(h.NLayers, func(x *runner.Experts, _ int, p string) {
		b.BindExperts(x, p, h, false)
	})
	return m, b.Err()
}

func (m *Model) Matrices() []*runner.Weight {
	ws := m.Model.Matrices()
	for i := range m.Experts {
		ws = m.Experts[i].AppendMatrices(ws)
	}
	return ws
}

func (m *Model) Forward(c *runner.Runtime, _ *batch.UBatch) {
	m.ForwardLayers(c, func(li int) { m.Norm[li].Apply(c) },
		func(li int) { c.MoEFFN(&m.Gating, runner.SiLU, &m.Experts[li]) })
}
