package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync/atomic"

	"ubatch/engine"
)

// Defaults of Config.MaxEmbeddingInputs and Config.MaxEmbeddingTokens. OpenAI takes up to 2048
// inputs and 300k tokens per request on GPUs; on a CPU a request's time grows with its tokens
// (a small model embeds a few thousand tokens a second), so the defaults keep one request to
// seconds, and the input cap bounds the per-item work and response size of many tiny inputs.
const (
	DefaultMaxEmbeddingInputs = 256
	DefaultMaxEmbeddingTokens = 32768
)

// Embedder configures the embedding routes (server/openai's /v1/embeddings, server/ollama's
// /api/embed and /api/embeddings): their inputs go to the engine (engine.SubmitEmbed) as prompt-only
// sequences, computed by its one runner under its step budget beside the generating streams,
// at Priority; Pooling and normalization are applied there.
type Embedder struct {
	Pooling  engine.Pooling
	NCtx     int             // longest input in tokens; 0 or more than the engine's n_ctx_seq: that
	Priority engine.Priority // of its prompt chunks against other prompts'; decode tokens go first
	// computed counts the inputs embedded since the start (tests read it).
	computed atomic.Int64
}

// NewEmbedder is an Embedder pooling with pool, inputs of at most nCtx tokens, at low priority.
func NewEmbedder(pool engine.Pooling, nCtx int) *Embedder {
	return &Embedder{Pooling: pool, NCtx: nCtx, Priority: engine.PriorityLow}
}

// EmbedCtx is the longest input the engine embeds for a route whose own bound is n (0: none).
func (s *Server) EmbedCtx(n int) int {
	if lim := s.cfg.Engine.Limits().NCtxSeq; n <= 0 || n > lim {
		return lim
	}
	return n
}

// Embed computes the embedding of every input of toks in the engine, in one SubmitEmbed: the
// vectors in input order, each pooled with pool and, with normalize, of unit L2 norm. computed
// counts the inputs done. When ctx ends (the client left) the inputs not done yet are dropped
// at the engine's next step and Embed returns context.Cause(ctx). cacheSalt is the request's
// cache_salt (salt.go; PoolLast inputs use the prefix cache).
func (s *Server) Embed(ctx context.Context, toks [][]int32, pool engine.Pooling, normalize bool, prio engine.Priority, cacheSalt string, computed *atomic.Int64) ([][]float32, error) {
	salt := requestSalt(ctx, cacheSalt)
	reqs := make([]engine.EmbedRequest, len(toks))
	for i, t := range toks {
		reqs[i] = engine.EmbedRequest{Prompt: t, Pooling: pool, Normalize: normalize, Priority: prio, Salt: salt}
	}
	st, err := s.cfg.Engine.SubmitEmbed(ctx, reqs...)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(toks))
	for {
		o, err := st.Recv(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return out, nil
		case err != nil:
			st.Cancel(engine.FinishCancelled)
			return nil, context.Cause(ctx)
		case o.Finish == engine.FinishCancelled:
			st.Cancel(engine.FinishCancelled)
			if err := context.Cause(ctx); err != nil {
				return nil, err
			}
			return nil, errShutdown
		case o.Finish != engine.FinishStop:
			st.Cancel(engine.FinishCancelled)
			if o.Err == nil {
				o.Err = fmt.Errorf("embedding input %d: %s", o.Seq, o.Finish)
			}
			return nil, o.Err
		}
		computed.Add(1)
		out[o.Seq] = o.Embedding
	}
}

// CheckDimensions checks a request's dimensions (nil: the model's width dim): 1 to dim.
func CheckDimensions(d *int, dim int) error {
	if d != nil && (*d < 1 || *d > dim) {
		return BadRequest("dimensions", "dimensions must be in [1, %d] (this model's width), got %d", dim, *d)
	}
	return nil
}

// TruncateEmbeddings keeps the first d of each unit vector of width dim and normalizes them
// again, as OpenAI's text-embedding-3 and Ollama shorten embeddings; nil or dim: vecs as they are.
func TruncateEmbeddings(vecs [][]float32, d *int, dim int) [][]float32 {
	if d == nil || *d >= dim {
		return vecs
	}
	for i, v := range vecs {
		vecs[i] = normalize(v[:*d])
	}
	return vecs
}

// EmbeddingTokens tokenizes every input before any is embedded, so that a request over a limit is
// refused before it costs any compute. Each input must fit the embedding context of nCtx tokens
// (or, with truncate, Ollama's default, is cut to it) and all together Config.MaxEmbeddingTokens;
// tokenizing stops at the first input over either.
func (s *Server) EmbeddingTokens(inputs []PromptInput, nCtx int, truncate bool) ([][]int32, error) {
	limit := orDefault(s.cfg.MaxEmbeddingTokens, DefaultMaxEmbeddingTokens)
	out := make([][]int32, 0, len(inputs))
	total := 0
	for i, in := range inputs {
		if truncate && in.isText {
			// The first nCtx tokens lie in the text's first TextBound bytes.
			in.text = firstBytes(in.text, s.TextBound())
		}
		toks, err := s.PromptTokens("input", in)
		if err != nil {
			return nil, err
		}
		if truncate && len(toks) > nCtx {
			toks = toks[:nCtx]
		}
		if len(toks) > nCtx {
			return nil, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "input", Code: "context_length_exceeded",
				Message: fmt.Sprintf("input[%d] has %d tokens, more than the embedding context of %d", i, len(toks), nCtx)}
		}
		if total += len(toks); total > limit {
			return nil, BadRequest("input", "input has more than %d tokens in all (%d in its first %d items); this server "+
				"embeds at most %d per request (--max-embedding-tokens): split the request", limit, total, i+1, limit)
		}
		out = append(out, toks)
	}
	return out, nil
}

// Computed counts the inputs e embedded since the start (Server.Embed adds to it).
func (e *Embedder) Computed() *atomic.Int64 { return &e.computed }

// MaxEmbeddingInputs is Config.MaxEmbeddingInputs with its default: the inputs of one
// embeddings request (/v1/embeddings', Ollama's).
func (s *Server) MaxEmbeddingInputs() int {
	return orDefault(s.cfg.MaxEmbeddingInputs, DefaultMaxEmbeddingInputs)
}

// MaxEmbeddingTokens is Config.MaxEmbeddingTokens with its default: the tokens of one
// embeddings or rerank request's inputs in all.
func (s *Server) MaxEmbeddingTokens() int {
	return orDefault(s.cfg.MaxEmbeddingTokens, DefaultMaxEmbeddingTokens)
}

// orDefault is v, or def when v is not positive (a Config field left at zero).
func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// normalize scales v to unit length (a zero vector stays zero).
func normalize(v []float32) []float32 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum == 0 {
		return v
	}
	inv := float32(1 / math.Sqrt(sum))
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = x * inv
	}
	return out
}
