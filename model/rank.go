package model

import (
	"math"

	"ubatch/runner"
)

// PoolingRank is llama.cpp's LLAMA_POOLING_TYPE_RANK: the ARCH.pooling_type of a reranker, a
// model that scores a (query, document) pair instead of embedding or continuing text.
const PoolingRank = 4

// RankHead is a reranker's classification head over the last token's final-norm hidden state
// (the state Options.Embeddings contexts return). Its first class is the relevance score, as
// llama-server reports it.
//
// llama.cpp pools a rank model's first token for every architecture but Qwen 3, which uses the
// last: the others are BERT-style encoders whose first token is [CLS] and sees the whole input.
// Every family ubatch runs is a causal decoder, in which only the last token has seen the query
// and the document, so the last token is taken for all of them.
type RankHead struct {
	Out    runner.Weight // cls.output.weight: one row of Dim per class
	Bias   []float32     // cls.output.bias, or nil
	Labels []string      // ARCH.classifier.output_labels, or nil (one class)
	// Softmax makes the scores a softmax over the classes, as llama.cpp does for Qwen 3, whose
	// converter writes the LM head's "yes" and "no" rows as the two classes: the score is then
	// P(yes).
	Softmax bool
}

// Classes is the number of scores the head computes.
func (h *RankHead) Classes() int { return h.Out.Rows }

// Scores applies the head to a hidden state of Dim values: one score per class.
func (h *RankHead) Scores(hidden []float32) []float32 {
	row := make([]float32, h.Out.Cols)
	out := make([]float32, h.Out.Rows)
	for r := range out {
		h.Out.Row(r, row)
		var s float64
		for i, v := range row {
			s += float64(v) * float64(hidden[i])
		}
		if h.Bias != nil {
			s += float64(h.Bias[r])
		}
		out[r] = float32(s)
	}
	if h.Softmax {
		mx := math.Inf(-1)
		for _, v := range out {
			mx = math.Max(mx, float64(v))
		}
		var sum float64
		for i, v := range out {
			e := math.Exp(float64(v) - mx)
			out[i] = float32(e)
			sum += e
		}
		for i := range out {
			out[i] = float32(float64(out[i]) / sum)
		}
	}
	return out
}

// Score is the relevance score of a hidden state: the head's first class.
func (h *RankHead) Score(hidden []float32) float32 { return h.Scores(hidden)[0] }

// RankHead binds a reranker's head when ARCH.pooling_type is rank, and returns nil otherwise
// (cls.output.weight then stays unused, as in llama.cpp). A rank file must have
// cls.output.weight of one row per label of ARCH.classifier.output_labels (one without labels);
// a BERT-style dense layer before it (cls.weight) belongs to encoder families ubatch does not
// run, and is refused rather than skipped, which would give wrong scores.
func (b *Binder) RankHead(dim int) *RankHead {
	if b.Int("pooling_type", 0, 0, 16) != PoolingRank || b.err != nil {
		return nil
	}
	if b.HasTensor("cls.weight") {
		b.Fail("tensor \"cls.weight\": a dense layer before the rank head is not supported (only cls.output.weight)")
		return nil
	}
	h := &RankHead{Softmax: b.Arch == "qwen3"}
	classes := 1
	if b.Has("classifier.output_labels") {
		labels, ok := b.File.Strings(b.key("classifier.output_labels"))
		if !ok || len(labels) == 0 {
			b.Fail("metadata %s is not a non-empty list of strings", b.key("classifier.output_labels"))
			return nil
		}
		h.Labels, classes = labels, len(labels)
	}
	if !b.HasTensor("cls.output.weight") {
		b.Fail("tensor \"cls.output.weight\" is missing: %s is rank (a reranker) but the file has no rank head", b.key("pooling_type"))
		return nil
	}
	h.Out = b.Weight("cls.output.weight", dim, classes)
	h.Bias = b.Vector("cls.output.bias", classes, true)
	if b.err != nil {
		return nil
	}
	return h
}

// Ranker is a graph that carries a rank head (every family's output tensors do; see
// llama.Embeddings).
type Ranker interface{ RankHead() *RankHead }

// RankHead is the model's rank head, or nil when the model is not a reranker.
func (m *Model) RankHead() *RankHead {
	if r, ok := m.Graph.(Ranker); ok {
		return r.RankHead()
	}
	return nil
}
