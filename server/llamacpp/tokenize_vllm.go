package llamacpp

import (
	"encoding/json"
	"net/http"
	"strings"
	"ubatch/server"
)

// vllmTokenizeFields are vLLM's /tokenize bodies beside llama.cpp's on the same route: a
// completion prompt, or chat messages rendered by the chat template. Which form a body is
// follows from its fields: content is llama.cpp's, prompt or messages vLLM's; more than one of
// them is a 400, so that no field is silently ignored.
type vllmTokenizeFields struct {
	Prompt               *string         `json:"prompt"`
	Messages             json.RawMessage `json:"messages"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"`    // prompt: default true; messages: true adds a BOS
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"` // default true; false is refused
	ContinueFinalMessage bool            `json:"continue_final_message"`
	ReturnTokenStrs      bool            `json:"return_token_strs"`
	Tools                json.RawMessage `json:"tools"`
	ChatTemplateKwargs   map[string]any  `json:"chat_template_kwargs"`
}

func (r *tokenizeRequest) isVLLM() bool { return r.Prompt != nil || !server.IsNull(r.Messages) }

// vllmTokenize answers vLLM's /tokenize: {"tokens", "count", "max_model_len"}, and
// "token_strs" when asked.
func (s *api) vllmTokenize(w http.ResponseWriter, req *tokenizeRequest) {
	toks, err := s.vllmTokens(req)
	if err != nil {
		server.WriteError(w, err)
		return
	}
	lim := s.Config().Engine.Limits()
	maxLen := lim.NCtxSeq
	if maxLen <= 0 {
		maxLen = lim.NCtx
	}
	out := map[string]any{"tokens": toks, "count": len(toks), "max_model_len": maxLen}
	if req.ReturnTokenStrs {
		strs := make([]string, len(toks))
		for i, t := range toks {
			strs[i] = strings.ToValidUTF8(string(s.Config().Model.Vocab.Piece(t)), "\uFFFD")
		}
		out["token_strs"] = strs
	}
	server.WriteJSON(w, http.StatusOK, out)
}

// vllmTokens tokenizes a vLLM body: the prompt as /v1/completions would (special-token text
// parsed, BOS as the model asks unless add_special_tokens is false), the messages as
// /v1/chat/completions renders and tokenizes them (add_special_tokens: true adds a BOS the
// template did not write).
func (s *api) vllmTokens(req *tokenizeRequest) ([]int32, error) {
	v := s.Config().Model.Vocab
	switch {
	case req.Content != nil:
		second := "prompt"
		if req.Prompt == nil {
			second = "messages"
		}
		return nil, server.BadRequest(second, "content (llama.cpp's) and %s (vLLM's) cannot be used together: send one body form", second)
	case req.Prompt != nil && !server.IsNull(req.Messages):
		return nil, server.BadRequest("messages", "prompt and messages cannot be used together")
	case req.Prompt != nil:
		add := req.AddSpecialTokens == nil || *req.AddSpecialTokens
		return append([]int32{}, v.Encode(*req.Prompt, add, true)...), nil
	case req.AddGenerationPrompt != nil && !*req.AddGenerationPrompt:
		return nil, server.BadRequest("add_generation_prompt", "add_generation_prompt: false is not supported: the chat template always gets the assistant's turn")
	case req.ContinueFinalMessage:
		return nil, server.BadRequest("continue_final_message", "continue_final_message is not supported")
	}
	text, err := s.RenderChat(req.Messages, req.Tools, req.ChatTemplateKwargs)
	if err != nil {
		return nil, err
	}
	toks := v.Encode(text, false, true)
	// As server.ChatParams does, and with add_special_tokens whatever the model says.
	wantBOS := v.AddBOS() || req.AddSpecialTokens != nil && *req.AddSpecialTokens
	if wantBOS && v.BOS() >= 0 && (s.BOSText() == "" || !strings.HasPrefix(text, s.BOSText())) {
		toks = append([]int32{v.BOS()}, toks...)
	}
	return toks, nil
}
