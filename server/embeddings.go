package server

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"sync"

	"ubatch/model"
	"ubatch/runner"
)

// Embedder computes sentence embeddings for POST /v1/embeddings on a runner context of its own
// (the engine's context computes logits), one input at a time: embedding requests are short
// prompt passes that need no scheduling.
type Embedder struct {
	mu   sync.Mutex
	c    *runner.Context
	pool runner.Pooling
}

// NewEmbedder makes an embedding context of nCtx cells over m's graph (it shares the weights).
func NewEmbedder(m *model.Model, nCtx, threads int, pool runner.Pooling) (*Embedder, error) {
	c, err := runner.NewContext(m.Graph, runner.Options{NCtx: nCtx, NBatch: nCtx, NUBatch: min(nCtx, 512), Threads: threads, Embeddings: true})
	if err != nil {
		return nil, err
	}
	return &Embedder{c: c, pool: pool}, nil
}

// Close stops the embedder's workers.
func (e *Embedder) Close() { e.c.Close() }

// NCtx is the longest input in tokens.
func (e *Embedder) NCtx() int { return e.c.Options().NCtx }

func (e *Embedder) embed(toks []int32) ([]float32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return runner.Embed(e.c, toks, e.pool)
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
	resp := embeddingsResponse{Object: "list", Model: s.cfg.ModelID}
	for i, in := range inputs {
		toks, err := s.promptTokens("input", in)
		if err == nil && len(toks) > e.NCtx() {
			err = &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "input", code: "context_length_exceeded",
				message: "input has more tokens than the embedding context"}
		}
		if err != nil {
			writeError(w, err)
			return
		}
		vec, err := e.embed(toks)
		if err != nil {
			writeError(w, err)
			return
		}
		item := embeddingJSON{Object: "embedding", Index: i, Embedding: vec}
		if req.EncodingFormat == "base64" {
			raw := make([]byte, 4*len(vec))
			for j, v := range vec {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(v))
			}
			item.Embedding = base64.StdEncoding.EncodeToString(raw)
		}
		resp.Data = append(resp.Data, item)
		resp.Usage.PromptTokens += len(toks)
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	writeJSON(w, http.StatusOK, resp)
}
