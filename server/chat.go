package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"ubatch/chat"
)

// ChatRequest is a chat as the core renders, constrains and tokenizes it (ChatParams): the body
// of OpenAI's /v1/chat/completions (server/openai), and what Ollama's and the Responses API's
// chats become.
type ChatRequest struct {
	SamplingFields
	OpenAIFields
	Messages           json.RawMessage `json:"messages"`
	TopLogprobs        *int            `json:"top_logprobs"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	ResponseFormat     json.RawMessage `json:"response_format"`
	ChatTemplateKwargs map[string]any  `json:"chat_template_kwargs"` // llama.cpp: extra template variables
	ReasoningFormat    *string         `json:"reasoning_format"`     // llama.cpp: none, auto or deepseek
	ReasoningEffort    *string         `json:"reasoning_effort"`     // OpenAI's: the template's thinking switch (applyEffort)

	Reasoning ReasoningMode // set by ChatParams: how the reply is read for reasoning
}

// ChatParams validates a chat request, renders its messages with the chat template and tokenizes
// the result (special-token text parsed; BOS added when the model wants it and the template did
// not already write it).
func (s *Server) ChatParams(ctx context.Context, req *ChatRequest) (GenParams, []int32, error) {
	g, err := req.Params(s.Defaults(OpenAIDefaults()), s.cfg.Model.Vocab.EOG(), s.cfg.Model.Vocab.VocabSize())
	if err != nil {
		return g, nil, err
	}
	if err := g.SetMaxTokens(req.MaxTokens, req.MaxCompletionTokens); err != nil {
		return g, nil, err
	}
	g.Stream = req.Stream
	if err := g.SetN(req.N, 1, s.MaxN()); err != nil {
		return g, nil, err
	}
	if g.Logprobs, _, err = ParseLogprobs(req.Logprobs); err != nil {
		return g, nil, err
	}
	if req.TopLogprobs != nil {
		if *req.TopLogprobs < 0 || *req.TopLogprobs > MaxTopLogprobs {
			return g, nil, BadRequest("top_logprobs", "top_logprobs must be in [0, %d], got %d", MaxTopLogprobs, *req.TopLogprobs)
		}
		if !g.Logprobs {
			return g, nil, BadRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
		g.TopLogprobs = *req.TopLogprobs
	}
	if err := s.Constrain(ctx, &g, &req.SamplingFields, req.ResponseFormat); err != nil {
		return g, nil, err
	}
	if g.Tools, err = s.toolSetup(ctx, &g, req); err != nil {
		return g, nil, err
	}
	if req.ReasoningEffort != nil {
		if err := s.ApplyEffort("reasoning_effort", *req.ReasoningEffort, req); err != nil {
			return g, nil, err
		}
	}
	text, err := s.RenderChat(req.Messages, req.Tools, req.ChatTemplateKwargs)
	if err != nil {
		return g, nil, err
	}
	if req.Reasoning, err = s.ReasoningSetup(req.ReasoningFormat, text, &g); err != nil {
		return g, nil, err
	}
	v := s.cfg.Model.Vocab
	toks := v.Encode(text, false, true)
	if v.AddBOS() && v.BOS() >= 0 && (s.bosText == "" || !strings.HasPrefix(text, s.bosText)) {
		toks = append([]int32{v.BOS()}, toks...)
	}
	if len(toks) == 0 {
		return g, nil, BadRequest("messages", "the rendered conversation is empty")
	}
	ns := turnNamespace(ctx, g.cacheSalt)
	toks, _ = s.reuseTurn(ns, text, toks, req.Messages)
	if g.n == 1 && g.Tools == nil && !req.Reasoning.Split {
		// The reply comes back as the next turn's assistant content only when nothing was
		// taken out of it (tool calls, reasoning).
		g.remember = s.rememberTurn(ns, text, toks)
	}
	return g, toks, nil
}

// parseMessages checks the messages' shape (a non-empty list of objects with a string role),
// their count (Limits.MaxMessages) and each one's content parts (MaxContentParts), and that
// their text could fit in a sequence (TextBound), before any message is rendered. The list is
// counted before it is decoded (countElements), so that a list of any length costs one pass
// over its first MaxMessages items; the template decides what else it needs.
func (s *Server) parseMessages(raw json.RawMessage) ([]map[string]any, error) {
	if IsNull(raw) {
		return nil, BadRequest("messages", "messages is required")
	}
	lim := s.cfg.Limits
	if n := countElements(raw, lim.MaxMessages); n > lim.MaxMessages {
		return nil, BadRequest("messages", "messages has more than %d items (--max-messages)", lim.MaxMessages)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, BadRequest("messages", "messages must be a list of message objects")
	}
	if len(list) == 0 {
		return nil, BadRequest("messages", "messages is empty")
	}
	msgs := make([]map[string]any, len(list))
	text := 0
	for i, el := range list {
		var m map[string]any
		if err := json.Unmarshal(el, &m); err != nil {
			return nil, BadRequest("messages", "messages[%d] must be a message object", i)
		}
		if m == nil {
			return nil, BadRequest("messages", "messages[%d] is null", i)
		}
		if role, ok := m["role"].(string); !ok || role == "" {
			return nil, BadRequest("messages", "messages[%d] has no role", i)
		}
		switch c := m["content"].(type) {
		case nil, string:
		case []any:
			if len(c) > lim.MaxContentParts {
				return nil, BadRequest("messages", "messages[%d].content has %d parts, at most %d are allowed (--max-content-parts)", i, len(c), lim.MaxContentParts)
			}
			for j, part := range c {
				if pm, _ := part.(map[string]any); pm["type"] != "text" {
					return nil, BadRequest("messages", "messages[%d].content[%d] has type %s: this server takes text parts only (no images or audio)", i, j, Echo(fmt.Sprint(pm["type"])))
				}
			}
		default:
			return nil, BadRequest("messages", "messages[%d].content must be a string, a list of parts or null, got %T", i, c)
		}
		if text += textBytes(m); text > s.TextBound() {
			return nil, s.CheckText("messages", text)
		}
		objectArguments(m)
		msgs[i] = m
	}
	return msgs, nil
}

// textBytes is the bytes of the strings in v, a JSON-decoded value: what a template can print
// of it, keys aside.
func textBytes(v any) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case []any:
		n := 0
		for _, e := range v {
			n += textBytes(e)
		}
		return n
	case map[string]any:
		n := 0
		for _, e := range v {
			n += textBytes(e)
		}
		return n
	}
	return 0
}

// RenderChat renders the request's messages (and tools, and extra template variables) with the
// model's chat template, adding the generation prompt.
func (s *Server) RenderChat(messages, toolsRaw json.RawMessage, kwargs map[string]any) (string, error) {
	msgs, err := s.parseMessages(messages)
	if err != nil {
		return "", err
	}
	if n := textBytes(kwargs); n > s.TextBound() {
		return "", s.CheckText("chat_template_kwargs", n)
	}
	var tools []any
	if !IsNull(toolsRaw) {
		var list []json.RawMessage
		if err := json.Unmarshal(toolsRaw, &list); err != nil {
			return "", BadRequest("tools", "tools must be a list of tool objects")
		}
		for _, t := range list {
			tools = append(tools, t)
		}
	}
	text, err := s.tmpl.Render(msgs, chat.Options{
		BOS: s.bosText, EOS: s.eosText, AddGenerationPrompt: true, Tools: tools, Vars: kwargs, Timeout: s.cfg.Limits.RenderTimeout,
	})
	if err != nil {
		// A render that runs out of time or steps is the request's doing (the template is
		// the server's, tested on real conversations): a 400, never a 500 a router would hold
		// against the node.
		if errors.Is(err, chat.ErrTimeout) {
			return "", &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "messages", Code: "template_timeout",
				Message: err.Error() + ": the messages take the chat template too long to render; send fewer or shorter ones"}
		}
		return "", BadRequest("messages", "the chat template rejected the messages: %v", err)
	}
	if len(text) > s.TextBound() {
		return "", s.CheckText("messages", len(text))
	}
	return text, nil
}

// objectArguments turns the JSON-text arguments of an assistant message's tool_calls (as OpenAI
// clients send them back) into objects, which is what chat templates iterate over or print
// with tojson.
func objectArguments(m map[string]any) {
	calls, _ := m["tool_calls"].([]any)
	for _, c := range calls {
		call, _ := c.(map[string]any)
		fn, _ := call["function"].(map[string]any)
		if text, ok := fn["arguments"].(string); ok {
			var obj map[string]any
			if json.Unmarshal([]byte(text), &obj) == nil {
				fn["arguments"] = obj
			}
		}
	}
}
