package server

import (
	"encoding/json"
	"net/http"

	"ubatch/sample"
)

// handleModel is OpenAI's GET /v1/models/{id}: the served model, or 404 for any other id.
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id != s.cfg.ModelID {
		writeError(w, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "model", code: "model_not_found",
			message: "the model " + id + " does not exist: this server serves " + s.cfg.ModelID})
		return
	}
	writeJSON(w, http.StatusOK, modelJSON{ID: s.cfg.ModelID, Object: "model", Created: s.created, OwnedBy: "ubatch"})
}

// handleApplyTemplate is llama-server's POST /apply-template: the prompt text a chat request's
// messages render to, without generating.
func (s *Server) handleApplyTemplate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages           json.RawMessage `json:"messages"`
		Tools              json.RawMessage `json:"tools"`
		ChatTemplateKwargs map[string]any  `json:"chat_template_kwargs"`
	}
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, err)
		return
	}
	text, err := s.renderChat(req.Messages, req.Tools, req.ChatTemplateKwargs)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": text})
}

// handleProps is llama-server's GET /props: the server's defaults, slots, model and template.
func (s *Server) handleProps(w http.ResponseWriter, r *http.Request) {
	d := s.defaults(sample.DefaultParams())
	h := s.cfg.Model.Hparams()
	cfg := s.cfg.Engine.Config()
	kv := s.cfg.Engine.Stats().KV
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{
			"n_ctx": kv.Total * kv.BlockSize,
			"params": map[string]any{
				"temperature": d.Temperature, "top_k": d.TopK, "top_p": d.TopP, "min_p": d.MinP,
				"repeat_penalty": d.RepeatPenalty, "repeat_last_n": d.RepeatLastN,
			},
		},
		"total_slots":   cfg.MaxRunning,
		"model_path":    s.cfg.Model.Path,
		"model_alias":   s.cfg.ModelID,
		"architecture":  s.cfg.Model.Arch,
		"n_embd":        h.Dim,
		"n_vocab":       h.Vocab,
		"chat_template": s.cfg.Model.ChatTemplate(),
		"bos_token":     s.bosText,
		"eos_token":     s.eosText,
		"modalities":    map[string]bool{"vision": false, "audio": false},
		"build_info":    "ubatch",
	})
}

// handleSlots is llama-server's GET /slots: one entry per running sequence.
func (s *Server) handleSlots(w http.ResponseWriter, r *http.Request) {
	out := []map[string]any{}
	for _, sl := range s.cfg.Engine.Slots() {
		state := "decoding"
		if sl.Prefilling {
			state = "prefilling"
		}
		out = append(out, map[string]any{
			"id": sl.ID, "is_processing": true, "state": state, "priority": int(sl.Priority),
			"n_prompt_tokens": sl.PromptTokens, "n_prompt_tokens_cache": sl.CachedTokens,
			"n_past": sl.Processed, "n_decoded": sl.Generated, "n_predict": sl.MaxTokens,
			"t_since_submit_ms": sl.Since.Milliseconds(),
		})
	}
	writeJSON(w, http.StatusOK, out)
}
