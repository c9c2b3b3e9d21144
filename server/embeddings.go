package server

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"

	"ubatch/model"
	"ubatch/runner"
)

// Defaults of Config.MaxEmbeddingInputs and Config.MaxEmbeddingTokens. OpenAI takes up to 2048
// inputs and 300k tokens per request on GPUs; on a CPU a request's time grows with its tokens
// (a small model embeds a few thousand tokens a second), so the defaults keep one request to
// seconds, and the input cap bounds the per-item work and response size of many tiny inputs.
const (
	DefaultMaxEmbeddingInputs = 256
	DefaultMaxEmbeddingTokens = 32768
)

// Embedder computes sentence embeddings for POST /v1/embeddings on a runner context of its own
// (the engine's context computes logits), one input at a time: embedding requests are short
// prompt passes that need no scheduling. Requests take turns input by input, so a long request
// does not hold a short one for its whole duration.
type Embedder struct {
	turn chan struct{} // a one-slot semaphore over c: unlike a mutex, waiting for it can be abandoned
	c    *runner.Context
	pool runner.Pooling
	// computed counts the inputs embedded since the start (tests read it).
	computed atomic.Int64
	// afterInput, when set (by tests), runs after each input of embedAll with the request's context.
	afterInput func(ctx context.Context, done int)
}

// NewEmbedder makes an embedding context of nCtx cells over m's graph (it shares the weights).
func NewEmbedder(m *model.Model, nCtx, threads int, pool runner.Pooling) (*Embedder, error) {
	c, err := runner.NewContext(m.Graph, runner.Options{NCtx: nCtx, NBatch: nCtx, NUBatch: min(nCtx, 512), Threads: threads, Embeddings: true})
	if err != nil {
		return nil, err
	}
	return &Embedder{turn: make(chan struct{}, 1), c: c, pool: pool}, nil
}

// Close stops the embedder's workers.
func (e *Embedder) Close() { e.c.Close() }

// NCtx is the longest input in tokens.
func (e *Embedder) NCtx() int { return e.c.Options().NCtx }

// embedAll embeds each of inputs (each non-empty and at most NCtx tokens) in order. It stops as
// soon as ctx ends, before the next input and while waiting for its turn, so the work of a client
// that went away stops within one input; it then returns context.Cause(ctx).
func (e *Embedder) embedAll(ctx context.Context, inputs [][]int32) ([][]float32, error) {
	out := make([][]float32, 0, len(inputs))
	for i, toks := range inputs {
		if err := context.Cause(ctx); err != nil {
			return nil, err
		}
		select {
		case e.turn <- struct{}{}:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		vec, err := runner.Embed(e.c, toks, e.pool)
		<-e.turn
		if err != nil {
			return nil, err
		}
		e.computed.Add(1)
		out = append(out, vec)
		if e.afterInput != nil {
			e.afterInput(ctx, i+1)
		}
	}
	return out, nil
}

type embeddingsRequest struct {
	Input          json.RawMessage `json:"input"`
	Model          string          `json:"model"`
	EncodingFormat string          `json:"encoding_format"` // "float" (default) or "base64"
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

type embeddingJSON struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string of little-endian float32s
}

type embeddingsResponse struct {
	Object string          `json:"object"`
	Data   []embeddingJSON `json:"data"`
	Model  string          `json:"model"`
	Usage  struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// handleEmbeddings is OpenAI's POST /v1/embeddings: input is a string, a list of token ids, or a
// list of either; each gets the model's pooled, L2-normalized final hidden state.
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	e := s.cfg.Embedder
	if e == nil {
		writeError(w, notFound("embeddings are off: start the server with --embeddings"))
		return
	}
	var req embeddingsRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, err)
		return
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		writeError(w, badRequest("encoding_format", "encoding_format %q: use float or base64", req.EncodingFormat))
		return
	}
	if req.Dimensions != nil && *req.Dimensions != s.cfg.Model.Hparams().Dim {
		writeError(w, badRequest("dimensions", "dimensions %d is not supported: this model's embeddings have %d", *req.Dimensions, s.cfg.Model.Hparams().Dim))
		return
	}
	inputs, err := parsePrompts("input", req.Input)
	if err != nil {
		writeError(w, err)
		return
	}
	if limit := orDefault(s.cfg.MaxEmbeddingInputs, DefaultMaxEmbeddingInputs); len(inputs) > limit {
		writeError(w, badRequest("input", "input has %d items; this server embeds at most %d per request "+
			"(--max-embedding-inputs): split the request", len(inputs), limit))
		return
	}
	toks, err := s.embeddingTokens(inputs, e.NCtx(), false)
	if err != nil {
		writeError(w, err)
		return
	}
	vecs, err := e.embedAll(r.Context(), toks)
	if err != nil {
		writeError(w, err)
		return
	}
	resp := embeddingsResponse{Object: "list", Model: s.cfg.ModelID, Data: make([]embeddingJSON, 0, len(vecs))}
	for i, vec := range vecs {
		item := embeddingJSON{Object: "embedding", Index: i, Embedding: vec}
		if req.EncodingFormat == "base64" {
			raw := make([]byte, 4*len(vec))
			for j, v := range vec {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(v))
			}
			item.Embedding = base64.StdEncoding.EncodeToString(raw)
		}
		resp.Data = append(resp.Data, item)
		resp.Usage.PromptTokens += len(toks[i])
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	writeJSON(w, http.StatusOK, resp)
}

// embeddingTokens tokenizes every input before any is embedded, so that a request over a limit is
// refused before it costs any compute. Each input must fit the embedding context of nCtx tokens
// (or, with truncate, Ollama's default, is cut to it) and all together Config.MaxEmbeddingTokens;
// tokenizing stops at the first input over either.
func (s *Server) embeddingTokens(inputs []promptInput, nCtx int, truncate bool) ([][]int32, error) {
	limit := orDefault(s.cfg.MaxEmbeddingTokens, DefaultMaxEmbeddingTokens)
	out := make([][]int32, 0, len(inputs))
	total := 0
	for i, in := range inputs {
		toks, err := s.promptTokens("input", in)
		if err != nil {
			return nil, err
		}
		if truncate && len(toks) > nCtx {
			toks = toks[:nCtx]
		}
		if len(toks) > nCtx {
			return nil, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "input", code: "context_length_exceeded",
				message: fmt.Sprintf("input[%d] has %d tokens, more than the embedding context of %d", i, len(toks), nCtx)}
		}
		if total += len(toks); total > limit {
			return nil, badRequest("input", "input has more than %d tokens in all (%d in its first %d items); this server "+
				"embeds at most %d per request (--max-embedding-tokens): split the request", limit, total, i+1, limit)
		}
		out = append(out, toks)
	}
	return out, nil
}

// orDefault is v, or def when v is not positive (a Config field left at zero).
func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}
