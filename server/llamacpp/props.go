package llamacpp

import (
	"encoding/json"
	"net/http"

	"ubatch/engine"
	"ubatch/sample"
	"ubatch/server"
)

// handleApplyTemplate is llama-server's POST /apply-template: the prompt text a chat request's
// messages render to, without generating.
func (s *api) handleApplyTemplate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages           json.RawMessage `json:"messages"`
		Tools              json.RawMessage `json:"tools"`
		ChatTemplateKwargs map[string]any  `json:"chat_template_kwargs"`
	}
	release, err := s.DecodeParsed(w, r, &req)
	if err != nil {
		server.WriteError(w, err)
		return
	}
	defer release()
	text, err := s.RenderChat(req.Messages, req.Tools, req.ChatTemplateKwargs)
	if err != nil {
		server.WriteError(w, err)
		return
	}
	server.WriteJSON(w, http.StatusOK, map[string]string{"prompt": text})
}

// handleProps is llama-server's GET /props: the server's defaults, slots, model and template.
func (s *api) handleProps(w http.ResponseWriter, r *http.Request) {
	d := s.Defaults(sample.DefaultParams())
	h := s.Config().Model.Hparams()
	cfg := s.Config().Engine.Config()
	kv := s.Config().Engine.Stats().KV
	server.WriteJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{
			"n_ctx": kv.Total * kv.BlockSize,
			"params": map[string]any{
				"temperature": d.Temperature, "top_k": d.TopK, "top_p": d.TopP, "min_p": d.MinP,
				"repeat_penalty": d.RepeatPenalty, "repeat_last_n": d.RepeatLastN,
			},
		},
		"total_slots":   cfg.MaxRunning,
		"model_path":    s.Config().Model.Path,
		"model_alias":   s.Config().ModelID,
		"architecture":  s.Config().Model.Arch,
		"n_embd":        h.Dim,
		"n_vocab":       h.Vocab,
		"chat_template": s.Config().Model.ChatTemplate(),
		"bos_token":     s.BOSText(),
		"eos_token":     s.EOSText(),
		"modalities":    map[string]bool{"vision": false, "audio": false},
		"build_info":    "ubatch",
	})
}

// slotJSON is one entry of llama-server's GET /slots. A running slot adds its request (task);
// the prompt is given as token counts, not text (llama-server's prompt field is absent).
type slotJSON struct {
	slotHead
	*slotTask
}

// slotHead is what every slot shows.
type slotHead struct {
	ID           int32  `json:"id"`
	IDTask       int64  `json:"id_task"` // -1 when idle
	NCtx         int    `json:"n_ctx"`   // per sequence (n_ctx_seq)
	Speculative  bool   `json:"speculative"`
	IsProcessing bool   `json:"is_processing"`
	State        string `json:"state"` // ours: idle, prefilling or decoding
}

// slotTask is what a running slot's request is doing: llama-server's fields, then ours.
type slotTask struct {
	NPromptTokens          int              `json:"n_prompt_tokens"`
	NPromptTokensProcessed int              `json:"n_prompt_tokens_processed"` // computed so far, cached ones excluded
	NPromptTokensCache     int              `json:"n_prompt_tokens_cache"`
	Params                 slotParams       `json:"params"`
	NextToken              []slotNextTokens `json:"next_token"` // one: llama-server's shape
	Priority               int              `json:"priority"`
	Prefilling             bool             `json:"prefilling"`
	NPast                  int              `json:"n_past"` // prompt and generated tokens in the KV cache
	NDecoded               int              `json:"n_decoded"`
	NPredict               int              `json:"n_predict"` // -1: until end of generation or n_ctx
	SinceSubmitMS          int64            `json:"t_since_submit_ms"`
}

// slotParams are the request's sampling parameters under llama-server's names.
type slotParams struct {
	Seed             uint64  `json:"seed"`
	Temperature      float32 `json:"temperature"`
	TopK             int     `json:"top_k"`
	TopP             float32 `json:"top_p"`
	MinP             float32 `json:"min_p"`
	RepeatLastN      int     `json:"repeat_last_n"`
	RepeatPenalty    float32 `json:"repeat_penalty"`
	PresencePenalty  float32 `json:"presence_penalty"`
	FrequencyPenalty float32 `json:"frequency_penalty"`
	MaxTokens        int     `json:"max_tokens"`
	NPredict         int     `json:"n_predict"`
	Grammar          bool    `json:"grammar"` // ours: whether a grammar constrains it (llama-server gives its text)
}

type slotNextTokens struct {
	HasNextToken bool `json:"has_next_token"`
	NRemain      int  `json:"n_remain"` // -1: no n_predict
	NDecoded     int  `json:"n_decoded"`
}

// handleSlots is llama-server's GET /slots: one entry per slot (the engine's MaxRunning of them,
// as llama-server's n_parallel), idle ones too.
func (s *api) handleSlots(w http.ResponseWriter, r *http.Request) {
	nCtx := s.Config().Engine.Limits().NCtxSeq
	slots := s.Config().Engine.Slots()
	out := make([]slotJSON, 0, len(slots))
	for _, sl := range slots {
		j := slotJSON{slotHead: slotHead{ID: sl.ID, IDTask: -1, NCtx: nCtx, State: "idle"}}
		if sl.Running {
			j.IDTask, j.IsProcessing, j.State = int64(sl.Task), true, "decoding"
			if sl.Prefilling {
				j.State = "prefilling"
			}
			j.slotTask = newSlotTask(sl)
		}
		out = append(out, j)
	}
	server.WriteJSON(w, http.StatusOK, out)
}

func newSlotTask(sl engine.Slot) *slotTask {
	predict, remain := -1, -1
	if sl.MaxTokens > 0 {
		predict, remain = sl.MaxTokens, max(0, sl.MaxTokens-sl.Generated)
	}
	p := sl.Sampling
	return &slotTask{
		NPromptTokens: sl.PromptTokens, NPromptTokensCache: sl.CachedTokens,
		NPromptTokensProcessed: max(0, min(sl.Processed, sl.PromptTokens)-sl.CachedTokens),
		Params: slotParams{Seed: p.Seed, Temperature: p.Temperature, TopK: p.TopK, TopP: p.TopP, MinP: p.MinP,
			RepeatLastN: p.RepeatLastN, RepeatPenalty: p.RepeatPenalty, PresencePenalty: p.PresencePenalty,
			FrequencyPenalty: p.FrequencyPenalty, MaxTokens: predict, NPredict: predict, Grammar: p.Grammar != nil},
		NextToken: []slotNextTokens{{HasNextToken: true, NRemain: remain, NDecoded: sl.Generated}},
		Priority:  int(sl.Priority), Prefilling: sl.Prefilling, NPast: sl.Processed, NDecoded: sl.Generated,
		NPredict: predict, SinceSubmitMS: sl.Since.Milliseconds(),
	}
}
