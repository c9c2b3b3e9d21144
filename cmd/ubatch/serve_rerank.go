package main

import (
	"fmt"

	"ubatch/model"
	"ubatch/server"
)

// newReranker makes the context of POST /v1/rerank when on (serve --rerank, llama-server's
// --reranking), sized as the embeddings' one. A model that is not a reranker is refused at
// start rather than answering every request with a 400.
func newReranker(on bool, m *model.Model, threads int) (*server.Reranker, error) {
	if !on {
		return nil, nil
	}
	rr, err := server.NewReranker(m, min(m.Hparams().CtxTrain, 2048), threads)
	if err != nil {
		return nil, fmt.Errorf("--rerank: %w", err)
	}
	return rr, nil
}
