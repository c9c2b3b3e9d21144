package server

import (
	"cmp"
	"fmt"
	"net/http"

	"ubatch/chat"
	"ubatch/gguf"
)

// handleShow is Ollama's /api/show on a front. A loaded model answers itself (its engine's
// context, its template); another is described from its file, as Ollama reads the file rather
// than loading the model: the GGUF header (details, model_info), its chat template (or
// Config.ChatTemplate, serve's --chat-template), and the sampling defaults (Config.Sampling, else
// Ollama's), without num_ctx (the engine's context is known once loaded) and with the
// capabilities the template shows.
func (f *front) handleShow(w http.ResponseWriter, r *http.Request) {
	name, _, err := f.requestModel(r)
	if err != nil {
		WriteOllamaError(w, err)
		return
	}
	if name == "" {
		WriteOllamaError(w, BadRequest("model", "model is required"))
		return
	}
	spec, _, err := f.reg.resolve(name, true)
	if err != nil {
		WriteOllamaError(w, err)
		return
	}
	if f.reg.state(spec.ID) == "loaded" {
		f.dispatch(w, r)
		return
	}
	var req OllamaNameRequest
	if err := DecodeBody(w, r, f.s.cfg.MaxBodyBytes, &req); err != nil {
		WriteOllamaError(w, err)
		return
	}
	e, err := f.entry(spec)
	if err != nil {
		WriteOllamaError(w, err)
		return
	}
	file, err := gguf.Open(spec.Path)
	if err != nil {
		WriteOllamaError(w, InternalError(fmt.Errorf("model %s: %w", spec.ID, err)))
		return
	}
	defer file.Close()
	tmpl := fileTemplate(f.s.cfg.ChatTemplate, file)
	d := OllamaDefaults()
	if f.s.cfg.Sampling != nil {
		d = *f.s.cfg.Sampling
	}
	WriteJSON(w, http.StatusOK, ShowReply(file, spec.Path, e, tmpl, OllamaParams(d), TemplateCaps(tmpl), req.Verbose))
}

// fileTemplate is the chat template a model of file will use: override, else the file's
// tokenizer.chat_template when it parses, else ChatML (as New decides).
func fileTemplate(override string, file *gguf.File) string {
	src, _ := file.String("tokenizer.chat_template")
	src = cmp.Or(override, src)
	if src != "" {
		if _, err := chat.Parse(src); err == nil {
			return src
		}
	}
	return chat.Fallback().Source()
}
