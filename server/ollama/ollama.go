// Package ollama is Ollama's API over the server core: POST /api/chat, /api/generate,
// /api/embed and /api/embeddings, and a model's own GET /api/tags, /api/ps, /api/version and
// POST /api/show, /api/pull, DELETE /api/delete. Its handlers read Ollama's bodies and options
// onto the core's sampling fields and chat requests and word the answers as Ollama's objects and
// NDJSON streams. The shapes the multi-model front shares with it (model entries, /api/show's
// answer, the error body and the stream) are the core's.
package ollama

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"ubatch/server"
)

// ollamaModelName resolves a request's model name and says the name its reply reports. The
// server has one model: it answers to its id (serve --alias, or the file name), the file name
// with or without .gguf, each with Ollama's default tag ":latest" or without, and the reply
// echoes the name asked. Anything else is Ollama's 404, unless the front mapped the name onto
// this model (RegistryConfig.AnyName): then the reply reports the model's own id.
func (s *api) ollamaModelName(ctx context.Context, field, name string) (string, error) {
	if name == "" {
		return "", server.BadRequest(field, "%s is required", field)
	}
	if server.NameMapped(ctx) {
		return s.Config().ModelID, nil
	}
	return name, s.knownName(field, name)
}

// knownName is nil when name names this server's model, else Ollama's 404.
func (s *api) knownName(field, name string) error {
	base := filepath.Base(s.Config().Model.Path)
	known := append([]string{s.Config().ModelID, base, strings.TrimSuffix(base, filepath.Ext(base))}, s.Config().Aliases...)
	if slices.ContainsFunc(known, func(k string) bool { return server.SameModelName(k, name) }) {
		return nil
	}
	return &server.APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: field, Code: "model_not_found",
		Message: fmt.Sprintf("model %s not found", server.Echo(name))}
}

// ollamaSampling turns a request's options into SamplingFields: Ollama's defaults fill what is
// absent (unless the server has its own), num_predict's -1 and -2 (until the context is full)
// mean no limit, num_ctx must fit the server's context since the model is not reloaded for it,
// and an option this server does not implement is a 400 naming it. Unknown names are ignored,
// as Ollama does.
func (s *api) ollamaSampling(opts map[string]json.RawMessage) (server.SamplingFields, error) {
	var f server.SamplingFields
	mapped := map[string]json.RawMessage{}
	var bad []string
	for k, v := range opts {
		if server.IsNull(v) {
			continue
		}
		if name, ok := ollamaSamplingOptions[k]; ok {
			mapped[name] = v
			continue
		}
		if asks, ok := ollamaUnsupportedOptions[k]; ok && asks(v) {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return f, server.BadRequest(bad[0], "option %s is not supported by this server; remove it from options (see the README's Ollama table)", strings.Join(bad, ", "))
	}
	if raw, ok := opts["num_ctx"]; ok && !server.IsNull(raw) {
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			return f, server.BadRequest("num_ctx", "option num_ctx must be an integer")
		}
		if limit := s.Config().Engine.Limits().NCtxSeq; n > limit {
			return f, server.BadRequest("num_ctx", "option num_ctx %d is larger than this server's context of %d tokens per sequence: "+
				"ubatch does not reload the model for a request (start the server with a larger -c)", n, limit)
		}
	}
	if raw, ok := mapped["n_predict"]; ok {
		var n int
		if json.Unmarshal(raw, &n) == nil && n == -2 { // Ollama's "fill the context"
			mapped["n_predict"] = json.RawMessage("-1")
		}
	}
	body, err := json.Marshal(mapped)
	if err != nil {
		return f, server.InternalError(err)
	}
	if err := json.Unmarshal(body, &f); err != nil {
		return f, ollamaOptionError(err)
	}
	if s.Config().Sampling == nil {
		fill := func(p **float64, v float64) {
			if *p == nil {
				*p = &v
			}
		}
		fill(&f.Temperature, server.OllamaTemperature)
		fill(&f.TopP, server.OllamaTopP)
		fill(&f.RepeatPenalty, server.OllamaRepeatPenalty)
		if f.TopK == nil {
			k := server.OllamaTopK
			f.TopK = &k
		}
	}
	return f, nil
}

// ollamaOptionError names the option whose value has the wrong type, by Ollama's name.
func ollamaOptionError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		for k, v := range ollamaSamplingOptions {
			if v == te.Field {
				return server.BadRequest(k, "option %s: expected %s, got JSON %s", k, te.Type, te.Value)
			}
		}
	}
	return server.BadRequest("options", "options: %v", err)
}

// ollamaOptions are the options Ollama's requests carry, by name. The sampling ones map onto
// SamplingFields; the rest are load-time or hardware settings that do not change the output on
// this server (accepted), or sampling methods it does not implement (400 when they ask for
// something, as unsupported does for the other routes).
var (
	ollamaSamplingOptions = map[string]string{ // Ollama's name: SamplingFields' JSON name
		"num_predict": "n_predict", "temperature": "temperature", "top_k": "top_k", "top_p": "top_p",
		"min_p": "min_p", "seed": "seed", "stop": "stop", "repeat_penalty": "repeat_penalty",
		"repeat_last_n": "repeat_last_n", "presence_penalty": "presence_penalty",
		"frequency_penalty": "frequency_penalty",
	}
	// ollamaNoOpOptions change how Ollama loads or runs a model, not what it generates; num_keep
	// only matters when a context overflows, which here is a 400 rather than a shift.
	ollamaNoOpOptions = []string{"num_keep", "num_batch", "num_thread", "num_gpu", "main_gpu", "use_mmap",
		"use_mlock", "low_vram", "f16_kv", "vocab_only", "logits_all", "numa", "penalize_newline",
		"mirostat_tau", "mirostat_eta"}
	ollamaUnsupportedOptions = map[string]func(json.RawMessage) bool{
		"mirostat": server.Positive, "typical_p": server.BelowOne, "tfs_z": server.NotOne,
	}
)

// Routes registers Ollama's routes on s: a server.Dialect (Config.Dialects). HEAD / is already
// answered by the web page's GET / pattern (a GET pattern also matches HEAD), which is all
// Ollama's liveness probe checks.
func Routes(s *server.Server) {
	a := &api{Server: s}
	a.info = sync.OnceValue(a.buildOllamaIdentity)
	s.HandleFunc("POST /api/chat", a.handleOllamaChat)
	s.HandleFunc("POST /api/generate", a.handleOllamaGenerate)
	s.HandleFunc("POST /api/embed", a.handleOllamaEmbed)
	s.HandleFunc("POST /api/embeddings", a.handleOllamaEmbeddings)
	s.HandleFunc("GET /api/tags", a.handleOllamaTags)
	s.HandleFunc("GET /api/ps", a.handleOllamaPS)
	s.HandleFunc("POST /api/show", a.handleOllamaShow)
	s.HandleFunc("GET /api/version", s.HandleOllamaVersion)
	s.HandleFunc("POST /api/pull", a.handleOllamaPull)
	s.HandleFunc("DELETE /api/delete", a.handleOllamaDelete)
}

// api is the core Server as Ollama's handlers use it.
type api struct {
	*server.Server
	// info is the model as Ollama's routes describe it (models.go), built on first use.
	info func() server.OllamaIdentity
}
