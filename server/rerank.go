package server

import (
	"context"
	"fmt"
	"sync/atomic"

	"ubatch/engine"
	"ubatch/model"
)

// Reranker configures server/openai's POST /v1/rerank: each (query, document) prompt goes to
// the engine as an embedding request (engine.SubmitEmbed, last pooling, not normalized), as
// Embedder's inputs do; a pair's score is the model's rank head (model.RankHead) over the last
// token's final-norm hidden state.
type Reranker struct {
	head     *model.RankHead
	template string          // tokenizer.chat_template.rerank, or ""
	nCtx     int             // longest prompt; 0: the engine's n_ctx_seq
	Priority engine.Priority // of its prompt chunks, as Embedder's
	// computed counts the pairs scored since the start (tests read it).
	computed atomic.Int64
}

// NewReranker configures reranking with m's head for prompts of at most nCtx tokens, at low
// priority. m must be a reranker: a file whose pooling type is rank, with a rank head.
func NewReranker(m *model.Model, nCtx int) (*Reranker, error) {
	head := m.RankHead()
	if head == nil {
		return nil, fmt.Errorf("%s is not a reranker (%s.pooling_type is not rank, 4, with a cls.output.weight head)", m.Name, m.Arch)
	}
	tmpl, _ := m.File.String("tokenizer.chat_template.rerank")
	return &Reranker{head: head, template: tmpl, nCtx: nCtx, Priority: engine.PriorityLow}, nil
}

// Template is the model's rerank template (tokenizer.chat_template.rerank), or "".
func (rr *Reranker) Template() string { return rr.template }

// NCtx is the longest prompt rr was configured for; 0: the engine's n_ctx_seq (Server.EmbedCtx).
func (rr *Reranker) NCtx() int { return rr.nCtx }

// Score scores each prompt (a query and document pair as server/openai builds it) with rr's
// rank head, in the engine, in order; when ctx ends it stops with context.Cause(ctx).
func (s *Server) Score(ctx context.Context, rr *Reranker, prompts [][]int32) ([]float32, error) {
	hidden, err := s.Embed(ctx, prompts, engine.PoolLast, false, rr.Priority, "", &rr.computed)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(hidden))
	for i, h := range hidden {
		out[i] = rr.head.Score(h)
	}
	return out, nil
}
