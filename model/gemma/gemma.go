// Package gemma is the Gemma family, generations 2 and 3: embeddings scaled by sqrt(dim), NEOX
// rope, a GELU-gated feed-forward, RMSNorm after attention and after the feed-forward as well as
// before them, sliding-window attention on some layers, and:
//   - gemma2: soft-capped attention scores and logits; every other layer slides (from layer 0).
//   - gemma3: per-head Q/K RMSNorm; attention.sliding_window_pattern N makes every layer but each
//     N-th slide, with its own unscaled rope (rope.freq_base_swa); rope scaling on the others.
package gemma

import (
	"math"

	"ubatch/batch"
	"ubatch/model"
	"ubatch/model/llama"
	"ubatch/ops"
	"ubatch/runner"
)

func init() {
	model.Register("gemma2", func(b *model.Binder) (runner.Graph, error) { return load(b, 2) })
	model.Register("gemma3", func(b *model.Binder) (runner.Graph, error) { return load(b, 3) })
}

// Layer is one block's weights; QNorm and KNorm are nil for gemma2.
type Layer struct {
	AttnNorm, PostAttnNorm []float32
	QNorm, KNorm           []float32
	FFNNorm, PostFFNNorm   []float32
	llama.Block
	Rope *ops.Rope
	Attn runner.AttnParams
}

// Model is a loaded Gemma 2 or 3 model; the output is tied to the embedding in every release.
type Model struct {
	H runner.Hparams
	llama.Embeddings
	Layers        []Layer
	FinalSoftcap  float32 // 0: none
	embedScale    float32
	global, local *ops.Rope
}

func load(b *model.Binder, gen int) (runner.Graph, error) {
	m := &Model{H: b.Hparams()}
	h := &m.H
	if b.Err() != nil {
		return nil, b.Err()
	}
	m.embedScale = float32(math.Sqrt(float64(h.Dim)))
	dims, base := b.RopeBase(h.HeadDim)
	m.global = b.Rope(model.RopeOptions{Dims: dims, Base: base, NEOX: true, Scaled: true})
	m.local = m.global
	window := b.Int("attention.sliding_window", 4096, 1, 1<<24)
	pattern := 2
	var attnCap float32
	if gen == 2 {
		attnCap = b.Float("attn_logit_softcapping", 50, 0, 1e6)
		m.FinalSoftcap = b.Float("final_logit_softcapping", 30, 0, 1e6)
	} else {
		m.FinalSoftcap = b.Float("final_logit_softcapping", 0, 0, 1e6)
		pattern = 6
		m.local = b.Rope(model.RopeOptions{Dims: dims, Base: b.Float("rope.freq_base_swa", 10000, 0, 1e12), NEOX: true})
	}
	pattern = b.Int("attention.sliding_window_pattern", pattern, 1, 1<<16)
	if b.Err() != nil { // after an error the reads above are zero: pattern divides below
		return nil, b.Err()
	}
	// Gemma's query scale is 1/sqrt(head size), except the 27B models' 1/sqrt(dim/heads).
	scale := float32(1 / math.Sqrt(float64(h.HeadDim)))
	if (gen == 2 && h.NLayers == 46) || (gen == 3 && h.NLayers == 62) {
		scale = float32(1 / math.Sqrt(float64(h.Dim/h.NHeads)))
	}
	m.Bind(b, h)
	m.Layers = model.BindLayers(h.NLayers, func(l *Layer, i int, p string) {
		l.AttnNorm = b.Vector(p+"attn_norm.weight", h.Dim, false)
		l.PostAttnNorm = b.Vector(p+"post_attention_norm.weight", h.Dim, false)
		l.Bind(b, p, h)
		if gen == 3 {
			l.QNorm = b.Vector(p+"attn_q_norm.weight", h.HeadDim, false)
			l.KNorm = b.Vector(p+"attn_k_norm.weight", h.HeadDim, false)
		}
		l.FFNNorm = b.Vector(p+"ffn_norm.weight", h.Dim, false)
		l.PostFFNNorm = b.Vector(p+"post_ffw_norm.weight", h.Dim, false)
		l.Rope, l.Attn = m.global, runner.AttnParams{Scale: scale, Softcap: attnCap}
		// As llama.cpp's swa pattern: layer i slides unless i%pattern is pattern-1.
		if i%pattern < pattern-1 {
			l.Rope, l.Attn.Window = m.local, int32(window)
		}
	})
	return m, b.Err()
}

func (m *Model) Hparams() *runner.Hparams { return &m.H }

func (m *Model) LayerRope(l int) *ops.Rope { return m.Layers[l].Rope }

func (m *Model) Matrices() []*runner.Weight {
	ws := []*runner.Weight{m.Output}
	for i := range m.Layers {
		ws = m.Layers[i].AppendMatrices(ws)
	}
	return ws
}

func (m *Model) Forward(c *runner.Runtime, _ *batch.UBatch) {
	s, h := &c.S, &m.H
	c.Embed(&m.Embd, m.embedScale)
	for li := range m.Layers {
		l := &m.Layers[li]
		c.Norm(s.XN, s.X, l.AttnNorm)
		c.MatMul3(s.XN, &l.Wq, s.Q, &l.Wk, s.K, &l.Wv, s.V)
		if l.QNorm != nil {
			c.NormHeads(s.Q, h.NHeads, l.QNorm)
			c.NormHeads(s.K, h.NKVHeads, l.KNorm)
		}
		c.SelfAttention(li, l.Rope, l.Attn, &l.Wo)
		c.Norm(s.Tmp, s.Tmp, l.PostAttnNorm)
		c.Add(s.X, s.Tmp, h.Dim)
		c.Norm(s.XN, s.X, l.FFNNorm)
		c.GatedFFN(runner.GELU, &l.Gate, &l.Up, &l.Down)
		c.Norm(s.Tmp, s.Tmp, l.PostFFNNorm)
		c.Add(s.X, s.Tmp, h.Dim)
	}
	c.Output(m.OutNorm, m.Output, m.FinalSoftcap)
}
