package openai

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"

	"ubatch/server"
)

type embeddingsRequest struct {
	Input          json.RawMessage `json:"input"`
	Model          string          `json:"model"`
	EncodingFormat string          `json:"encoding_format"` // "float" (default) or "base64"
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
	CacheSalt      *string         `json:"cache_salt"` // vLLM's (the core's salt.go)
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
// list of either; each gets the model's pooled, L2-normalized final hidden state (the core's
// Embedder, Config.Embedder), cut to its first dimensions and normalized again when dimensions
// is below the model's width.
func (a *api) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	cfg := a.Config()
	e := cfg.Embedder
	if e == nil {
		server.WriteError(w, server.NotFound("embeddings are off: start the server with --embeddings"))
		return
	}
	var req embeddingsRequest
	release, err := a.DecodeParsed(w, r, &req)
	if err != nil {
		server.WriteError(w, err)
		return
	}
	defer release() // (called as soon as the inputs are tokenized)
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		server.WriteError(w, server.BadRequest("encoding_format", "encoding_format %s: use float or base64", server.Echo(req.EncodingFormat)))
		return
	}
	dim := cfg.Model.Hparams().Dim
	if err := server.CheckDimensions(req.Dimensions, dim); err != nil {
		server.WriteError(w, err)
		return
	}
	salt, err := server.CheckCacheSalt(req.CacheSalt)
	if err != nil {
		server.WriteError(w, err)
		return
	}
	inputs, err := server.ParsePrompts("input", req.Input)
	if err != nil {
		server.WriteError(w, err)
		return
	}
	if limit := a.MaxEmbeddingInputs(); len(inputs) > limit {
		server.WriteError(w, server.BadRequest("input", "input has %d items; this server embeds at most %d per request "+
			"(--max-embedding-inputs): split the request", len(inputs), limit))
		return
	}
	toks, err := a.EmbeddingTokens(inputs, a.EmbedCtx(e.NCtx), false)
	release()
	if err != nil {
		server.WriteError(w, err)
		return
	}
	vecs, err := a.Embed(r.Context(), toks, e.Pooling, true, e.Priority, salt, e.Computed())
	if err != nil {
		server.WriteError(w, err)
		return
	}
	vecs = server.TruncateEmbeddings(vecs, req.Dimensions, dim)
	resp := embeddingsResponse{Object: "list", Model: cfg.ModelID, Data: make([]embeddingJSON, 0, len(vecs))}
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
	server.WriteJSON(w, http.StatusOK, resp)
}
