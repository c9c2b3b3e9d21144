package ollama

import (
	"bytes"
	"cmp"
	"encoding/json"
	"net/http"
	"time"
	"ubatch/server"
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
func (s *api) handleOllamaEmbed(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req ollamaEmbedRequest
	release, err := s.DecodeParsed(w, r, &req)
	if err != nil {
		server.WriteOllamaError(w, err)
		return
	}
	defer release() // (called as soon as the inputs are tokenized)
	var inputs []server.PromptInput
	var one string
	var list []string
	switch in := bytes.TrimSpace(req.Input); {
	case server.IsNull(in):
		server.WriteOllamaError(w, server.BadRequest("input", "input is required"))
		return
	case json.Unmarshal(in, &one) == nil:
		inputs = []server.PromptInput{server.TextPrompt(one)}
	case json.Unmarshal(in, &list) == nil:
		for _, t := range list {
			inputs = append(inputs, server.TextPrompt(t))
		}
	default:
		server.WriteOllamaError(w, server.BadRequest("input", "input must be a string or a list of strings"))
		return
	}
	dim := s.Config().Model.Hparams().Dim
	if err := server.CheckDimensions(req.Dimensions, dim); err != nil {
		server.WriteOllamaError(w, err)
		return
	}
	vecs, n, err := s.ollamaEmbed(r, release, req.Model, inputs, req.Truncate == nil || *req.Truncate)
	if err != nil {
		server.WriteOllamaError(w, err)
		return
	}
	vecs = server.TruncateEmbeddings(vecs, req.Dimensions, dim)
	model, _ := s.ollamaModelName(r.Context(), "model", req.Model) // (checked by ollamaEmbed)
	server.WriteJSON(w, http.StatusOK, map[string]any{"model": model, "embeddings": vecs,
		"total_duration": int64(time.Since(start)), "load_duration": 0, "prompt_eval_count": n})
}

// handleOllamaEmbeddings is the older route: one prompt, one embedding (normalized, as every
// embedding of this server; Ollama's older route returns the raw pooled vector).
func (s *api) handleOllamaEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req ollamaEmbeddingsRequest
	release, err := s.DecodeParsed(w, r, &req)
	if err != nil {
		server.WriteOllamaError(w, err)
		return
	}
	defer release() // (called as soon as the inputs are tokenized)
	vecs, _, err := s.ollamaEmbed(r, release, req.Model, []server.PromptInput{server.TextPrompt(req.Prompt)}, true)
	if err != nil {
		server.WriteOllamaError(w, err)
		return
	}
	server.WriteJSON(w, http.StatusOK, map[string]any{"embedding": vecs[0]})
}

// ollamaEmbed checks the model and the inputs against /v1/embeddings' limits and embeds them;
// n is their tokens in all.
func (s *api) ollamaEmbed(r *http.Request, tokenized func(), model string, inputs []server.PromptInput, truncate bool) ([][]float32, int, error) {
	e := cmp.Or(s.Config().OllamaEmbedder, s.Config().Embedder)
	if _, err := s.ollamaModelName(r.Context(), "model", model); err != nil {
		return nil, 0, err
	}
	if e == nil {
		return nil, 0, server.NotFound("embeddings are off: start the server with --embeddings")
	}
	if len(inputs) == 0 {
		return nil, 0, server.BadRequest("input", "input is an empty list")
	}
	if limit := s.MaxEmbeddingInputs(); len(inputs) > limit {
		return nil, 0, server.BadRequest("input", "input has %d items; this server embeds at most %d per request "+
			"(--max-embedding-inputs): split the request", len(inputs), limit)
	}
	toks, err := s.EmbeddingTokens(inputs, s.EmbedCtx(e.NCtx), truncate)
	tokenized()
	if err != nil {
		return nil, 0, err
	}
	vecs, err := s.Embed(r.Context(), toks, e.Pooling, true, e.Priority, "", e.Computed())
	n := 0
	for _, t := range toks {
		n += len(t)
	}
	return vecs, n, err
}
