package main

import (
	"fmt"

	"ubatch/engine"
	"ubatch/model"
	"ubatch/server"
)

// embedCtx is the longest input of the embedders and the reranker: the model's training
// context, at most 2048 tokens.
func embedCtx(m *model.Model) int { return min(m.Hparams().CtxTrain, 2048) }

// newReranker configures POST /v1/rerank when on (serve --rerank, llama-server's --reranking),
// its prompts as long as the embeddings' inputs, computed by the engine at priority prio. A
// model that is not a reranker is refused at start rather than answering every request with a
// 400.
func newReranker(on bool, m *model.Model, prio engine.Priority) (*server.Reranker, error) {
	if !on {
		return nil, nil
	}
	rr, err := server.NewReranker(m, embedCtx(m))
	if err != nil {
		return nil, fmt.Errorf("--rerank: %w", err)
	}
	rr.Priority = prio
	return rr, nil
}

// modelPooling is serve's --pooling: flag when given (checked already), else the model's
// ARCH.pooling_type when it is mean (1), cls (2) or last (3), as llama-server takes it, else
// mean.
func modelPooling(m *model.Model, flag string) engine.Pooling {
	if flag != "" {
		return engine.Pooling(flag)
	}
	if t, ok := m.File.Uint(m.Arch + ".pooling_type"); ok {
		switch t {
		case 2:
			return engine.PoolCLS
		case 3:
			return engine.PoolLast
		}
	}
	return engine.PoolMean
}
