package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math"
	"net/http"
	"time"
)

// ollamaEmbedRequest is the body of Ollama's POST /api/embed.
type ollamaEmbedRequest struct {
	Model      string                     `json:"model"`
	Input      json.RawMessage            `json:"input"`
	Truncate   *bool                      `json:"truncate"` // default true: cut inputs to the context
	Dimensions *int                       `json:"dimensions"`
	Options    map[string]json.RawMessage `json:"options"`
	KeepAlive  json.RawMessage            `json:"keep_alive"`
}

// ollamaEmbeddingsRequest is the body of the older POST /api/embeddings.
type ollamaEmbeddingsRequest struct {
	Model     string                     `json:"model"`
	Prompt    string                     `json:"prompt"`
	Options   map[string]json.RawMessage `json:"options"`
	KeepAlive json.RawMessage            `json:"keep_alive"`
}

// handleOllamaEmbed embeds input (a string or a list of strings) with Config.OllamaEmbedder
// (serve sets it for every model, as Ollama embeds with any) and /v1/embeddings' limits. dimensions below the model's width keeps
// the first ones, normalized again, as Ollama does.
func (s *Server) handleOllamaEmbed(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req ollamaEmbedRequest
	release, err := s.DecodeParsed(w, r, &req)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	defer release() // (called as soon as the inputs are tokenized)
	var inputs []PromptInput
	var one string
	var list []string
	switch in := bytes.TrimSpace(req.Input); {
	case IsNull(in):
		writeOllamaError(w, BadRequest("input", "input is required"))
		return
	case json.Unmarshal(in, &one) == nil:
		inputs = []PromptInput{{text: one, isText: true}}
	case json.Unmarshal(in, &list) == nil:
		for _, t := range list {
			inputs = append(inputs, PromptInput{text: t, isText: true})
		}
	default:
		writeOllamaError(w, BadRequest("input", "input must be a string or a list of strings"))
		return
	}
	dim := s.cfg.Model.Hparams().Dim
	if err := checkDimensions(req.Dimensions, dim); err != nil {
		writeOllamaError(w, err)
		return
	}
	vecs, n, err := s.ollamaEmbed(r, release, req.Model, inputs, req.Truncate == nil || *req.Truncate)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	vecs = truncateEmbeddings(vecs, req.Dimensions, dim)
	model, _ := s.ollamaModelName(r.Context(), "model", req.Model) // (checked by ollamaEmbed)
	WriteJSON(w, http.StatusOK, map[string]any{"model": model, "embeddings": vecs,
		"total_duration": int64(time.Since(start)), "load_duration": 0, "prompt_eval_count": n})
}

// handleOllamaEmbeddings is the older route: one prompt, one embedding (normalized, as every
// embedding of this server; Ollama's older route returns the raw pooled vector).
func (s *Server) handleOllamaEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req ollamaEmbeddingsRequest
	release, err := s.DecodeParsed(w, r, &req)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	defer release() // (called as soon as the inputs are tokenized)
	vecs, _, err := s.ollamaEmbed(r, release, req.Model, []PromptInput{{text: req.Prompt, isText: true}}, true)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"embedding": vecs[0]})
}

// ollamaEmbed checks the model and the inputs against /v1/embeddings' limits and embeds them;
// n is their tokens in all.
func (s *Server) ollamaEmbed(r *http.Request, tokenized func(), model string, inputs []PromptInput, truncate bool) ([][]float32, int, error) {
	e := cmp.Or(s.cfg.OllamaEmbedder, s.cfg.Embedder)
	if _, err := s.ollamaModelName(r.Context(), "model", model); err != nil {
		return nil, 0, err
	}
	if e == nil {
		return nil, 0, NotFound("embeddings are off: start the server with --embeddings")
	}
	if len(inputs) == 0 {
		return nil, 0, BadRequest("input", "input is an empty list")
	}
	if limit := orDefault(s.cfg.MaxEmbeddingInputs, DefaultMaxEmbeddingInputs); len(inputs) > limit {
		return nil, 0, BadRequest("input", "input has %d items; this server embeds at most %d per request "+
			"(--max-embedding-inputs): split the request", len(inputs), limit)
	}
	toks, err := s.embeddingTokens(inputs, s.embedCtx(e.NCtx), truncate)
	tokenized()
	if err != nil {
		return nil, 0, err
	}
	vecs, err := s.embed(r.Context(), toks, e.Pooling, true, e.Priority, "", &e.computed)
	n := 0
	for _, t := range toks {
		n += len(t)
	}
	return vecs, n, err
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
