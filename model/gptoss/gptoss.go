// Package gptoss is OpenAI's gpt-oss family (gpt-oss-20b, gpt-oss-120b; GGUF architecture
// "gpt-oss", llama.cpp's openai-moe-iswa graph): grouped-query attention with biases on Q, K, V
// and the output, a learned sink logit per head (attn_sinks) in every softmax, NEOX rope with
// YaRN scaling, an attention.sliding_window on the even layers (llama.cpp's pattern of period 2,
// layer 0 sliding) and full attention on the odd ones; in every layer, after the norm stored as
// post_attention_norm, expert_count experts with biases of which the router (with a bias) picks
// expert_used_count per token: the top k logits, a softmax over those, and each expert's clamped
// SwiGLU (runner.SwiGLUOAI). The experts are MXFP4 in OpenAI's release.
package gptoss

import (
	"ubatch/batch"
	"ubatch/model"
	"ubatch/model/llama"
	"ubatch/model/qwen2"
	"ubatch/runner"
)

func init() { model.Register("gpt-oss", Load) }

// Layer is one block's weights: llama's attention matrices (no dense feed-forward), qwen2's Q,
// K and V biases, the output's bias and the experts.
type Layer struct {
	AttnNorm, PostAttnNorm []float32
	llama.Block
	qwen2.Bias
	OutBias []float32         // attn_output.bias [Dim]
	Attn    runner.AttnParams // Sinks (attn_sinks [NHeads]) and, on sliding layers, Window
	Experts runner.Experts
}

// Model is a loaded gpt-oss model.
type Model struct {
	llama.Base
	Layers []Layer
	Gating runner.Gating
}

// Load binds a gpt-oss file's tensors.
func Load(b *model.Binder) (runner.Graph, error) {
	m := &Model{Base: llama.Base{H: b.Hparams()}}
	h := &m.H
	b.ExpertHparams(h)
	if b.Err() != nil {
		return nil, b.Err()
	}
	// No layer has a dense feed-forward (feed_forward_length sizes nothing): the runner's FFN
	// scratch need only hold an expert's.
	h.FFN = h.ExpertFFN
	dims, base := b.RopeBase(h.HeadDim)
	m.Rope = b.Rope(model.RopeOptions{Dims: dims, Base: base, Scaled: true, NEOX: true})
	window := b.Int("attention.sliding_window", -1, 1, 1<<24)
	m.Gating = runner.Gating{Func: runner.TopKSoftmax, K: h.NExpertsUsed}
	m.Bind(b, h)
	bias := qwen2.BindBias(b, h)
	m.Layers = model.BindLayers(h.NLayers, func(l *Layer, i int, p string) {
		l.AttnNorm = b.Vector(p+"attn_norm.weight", h.Dim, false)
		l.PostAttnNorm = b.Vector(p+"post_attention_norm.weight", h.Dim, false)
		l.BindAttention(b, p, h)
		l.Bias = bias[i]
		l.OutBias = b.Vector(p+"attn_output.bias", h.Dim, false)
		l.Attn.Sinks = b.Vector(p+"attn_sinks.weight", h.NHeads, false)
		// llama.cpp's set_swa_pattern(2): layer i slides when i%2 < 1.
		if i%2 == 0 {
			l.Attn.Window = int32(window)
		}
		b.BindExperts(&l.Experts, p, h, true)
	})
	return m, b.Err()
}

func (m *Model) Matrices() []*runner.Weight {
	ws := []*runner.Weight{m.Output}
	for i := range m.Layers {
		l := &m.Layers[i]
		ws = l.Experts.AppendMatrices(l.AppendMatrices(ws))
	}
	return ws
}

func (m *Model) Forward(c *runner.Runtime, _ *batch.UBatch) {
	s, h := &c.S, &m.H
	c.Embed(&m.Embd, 1)
	for li := range m.Layers {
		l := &m.Layers[li]
		c.Norm(s.XN, s.X, l.AttnNorm)
		c.MatMul3(s.XN, &l.Wq, s.Q, &l.Wk, s.K, &l.Wv, s.V)
		l.Bias.Apply(c)
		c.SelfAttention(li, m.Rope, l.Attn, &l.Wo)
		c.AddBias(s.Tmp, l.OutBias)
		c.Add(s.X, s.Tmp, h.Dim)
		c.Norm(s.XN, s.X, l.PostAttnNorm)
		c.MoEFFN(&m.Gating, runner.SwiGLUOAI, &l.Experts)
		c.Add(s.X, s.Tmp, h.Dim)
	}
	c.Output(m.OutNorm, m.Output, 0)
}
