// Package llama is the llama family (Llama 2/3.x, TinyLlama, Mistral and the like): RMSNorm,
// rotary embeddings (adjacent pairs; Llama 3.1's per-pair frequency factors in rope_freqs.weight;
// linear or YaRN scaling), grouped-query attention and a SwiGLU feed-forward.
package llama

import (
	"ubatch/batch"
	"ubatch/model"
	"ubatch/ops"
	"ubatch/runner"
)

func init() { model.Register("llama", Load) }

// Layer is one transformer block's weights.
type Layer struct {
	AttnNorm, FFNNorm []float32
	Block
}

// Block is the seven matrices of a llama-style block, which other families (Gemma) keep too:
// separate Q, K, V and output projections, and a gated feed-forward.
type Block struct {
	Wq, Wk, Wv, Wo runner.Weight
	Gate, Up, Down runner.Weight
}

// Bind binds block p's ("blk.N.") seven matrices.
func (w *Block) Bind(b *model.Binder, p string, h *runner.Hparams) {
	w.BindAttention(b, p, h)
	w.Gate = b.Weight(p+"ffn_gate.weight", h.Dim, h.FFN)
	w.Up = b.Weight(p+"ffn_up.weight", h.Dim, h.FFN)
	w.Down = b.Weight(p+"ffn_down.weight", h.FFN, h.Dim)
}

// BindAttention binds block p's four attention matrices (the families whose feed-forward is
// not llama's bind the rest themselves).
func (w *Block) BindAttention(b *model.Binder, p string, h *runner.Hparams) {
	w.Wq = b.Weight(p+"attn_q.weight", h.Dim, h.QDim())
	w.Wk = b.Weight(p+"attn_k.weight", h.Dim, h.KVDim())
	w.Wv = b.Weight(p+"attn_v.weight", h.Dim, h.KVDim())
	w.Wo = b.Weight(p+"attn_output.weight", h.QDim(), h.Dim)
}

// AppendMatrices appends the seven matrices to ws (the graphs' Matrices, for packing), or the
// four of attention in a block without a dense feed-forward (LoadNEOXExperts).
func (w *Block) AppendMatrices(ws []*runner.Weight) []*runner.Weight {
	ws = append(ws, &w.Wq, &w.Wk, &w.Wv, &w.Wo)
	if w.Gate.Data == nil {
		return ws
	}
	return append(ws, &w.Gate, &w.Up, &w.Down)
}

// Base is what a family whose layers share one rope holds besides its layers: the
// hyperparameters, that rope and the tensors around the layers. Its methods are runner.Graph's
// Hparams and LayerRope.
type Base struct {
	H    runner.Hparams
	Rope *ops.Rope
	Embeddings
}

func (m *Base) Hparams() *runner.Hparams { return &m.H }

func (m *Base) LayerRope(int) *ops.Rope { return m.Rope }

// Model is a loaded llama model.
type Model struct {
	Base
	Layers []Layer
}

// Load binds a llama file's tensors.
func Load(b *model.Binder) (runner.Graph, error) { return load(b, false, true) }

// LoadNEOX binds the tensors of a file laid out as llama's whose rope is NEOX-style: the start
// of the families that extend the llama block (Qwen 2 and 3).
func LoadNEOX(b *model.Binder) (*Model, error) { return load(b, true, true) }

// LoadNEOXExperts is LoadNEOX for a file whose layers have no dense feed-forward (ffn_gate, up
// and down): the mixture-of-experts families bind their experts themselves and pass their FFN
// to ForwardLayers. ffn_norm is bound as in llama.
func LoadNEOXExperts(b *model.Binder) (*Model, error) { return load(b, true, false) }

func load(b *model.Binder, neox, dense bool) (*Model, error) {
	m := &Model{Base: Base{H: b.Hparams()}}
	h := &m.H
	if b.Err() != nil {
		return nil, b.Err()
	}
	dims, base := b.RopeBase(h.HeadDim)
	m.Rope = b.Rope(model.RopeOptions{Dims: dims, Base: base, Scaled: true, NEOX: neox,
		Factors: b.Vector("rope_freqs.weight", dims/2, true)})
	m.Bind(b, h)
	m.Layers = model.BindLayers(h.NLayers, func(l *Layer, _ int, p string) {
		l.AttnNorm = b.Vector(p+"attn_norm.weight", h.Dim, false)
		l.FFNNorm = b.Vector(p+"ffn_norm.weight", h.Dim, false)
		if dense {
			l.Bind(b, p, h)
		} else {
			l.BindAttention(b, p, h)
		}
	})
	return m, b.Err()
}

// Embeddings are the tensors every decoder-only family has around its layers.
type Embeddings struct {
	Embd    runner.Weight // token_embd: Vocab rows of Dim
	OutNorm []float32
	Output  *runner.Weight // output.weight, or &Embd when the file has none (tied)
	// Rank is a reranker's head (cls.output.weight; pooling_type rank), or nil.
	Rank *model.RankHead
}

// RankHead is the file's rank head, or nil (model.Ranker).
func (e *Embeddings) RankHead() *model.RankHead { return e.Rank }

// Bind binds token_embd, output_norm and output, and a reranker's head; a tied output points at
// Embd, so that packing it once serves both.
func (e *Embeddings) Bind(b *model.Binder, h *runner.Hparams) {
	e.Embd = b.Weight("token_embd.weight", h.Dim, -1)
	e.OutNorm = b.Vector("output_norm.weight", h.Dim, false)
	e.Output = &e.Embd
	if b.HasTensor("output.weight") {
		w := b.Weight("output.weight", h.Dim, h.Vocab)
		e.Output = &w
	}
	e.Rank = b.RankHead(h.Dim)
}

func (m *Model) Matrices() []*runner.Weight {
	ws := []*runner.Weight{m.Output}
	for i := range m.Layers {
		ws = m.Layers[i].AppendMatrices(ws)
	}
	return ws
}

func (m *Model) Forward(c *runner.Runtime, _ *batch.UBatch) { m.ForwardBlocks(c, nil) }

// ForwardBlocks is Forward with afterQKV, when not nil, run on layer li's Q, K and V (in
// Scratch) between their projections and the rotation: the hook of the families that extend the
// llama block (qwen2's biases, qwen3's per-head norms).
func (m *Model) ForwardBlocks(c *runner.Runtime, afterQKV func(li int)) {
	m.ForwardLayers(c, afterQKV, nil)
}

// ForwardLayers is ForwardBlocks with ffn, when not nil, computing layer li's feed-forward
// (Scratch.Tmp from XN, the normed residual) instead of the dense one: the hook of the
// mixture-of-experts families.
func (m *Model) ForwardLayers(c *runner.Runtime, afterQKV, ffn func(li int)) {
	s, h := &c.S, &m.H
	c.Embed(&m.Embd, 1)
	for li := range m.Layers {
		l := &m.Layers[li]
		c.Norm(s.XN, s.X, l.AttnNorm)
		c.MatMul3(s.XN, &l.Wq, s.Q, &l.Wk, s.K, &l.Wv, s.V)
		if afterQKV != nil {
			afterQKV(li)
		}
		c.SelfAttention(li, m.Rope, runner.AttnParams{}, &l.Wo)
		c.Add(s.X, s.Tmp, h.Dim)
		c.Norm(s.XN, s.X, l.FFNNorm)
		if ffn != nil {
			ffn(li)
		} else {
			c.GatedFFN(runner.SiLU, &l.Gate, &l.Up, &l.Down)
		}
		c.Add(s.X, s.Tmp, h.Dim)
	}
	c.Output(m.OutNorm, m.Output, 0)
}
