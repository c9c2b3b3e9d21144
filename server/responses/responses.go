package responses

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"ubatch/server"
	"unicode/utf8"
)

// maxResponseItems bounds the input items of one /v1/responses request, and the messages of a
// conversation once a previous response's are put in front: each is rendered into the prompt
// (the context bounds the tokens, this the work before tokenizing).
const maxResponseItems = 1024

// OpenAI's bounds on metadata, which a response carries back (and the store keeps).
const (
	maxMetadataPairs    = 16
	maxMetadataKeyLen   = 64
	maxMetadataValueLen = 512
)

// responsesRequest is the body of POST /v1/responses (OpenAI's Responses API). It is read
// onto a chat request (input items become messages, the flat tools chat's tools, text.format
// a response_format), so that it runs through the chat route's template, constraints and
// tool-call parsing. The sampling fields other routes take (top_k, seed, ...) are accepted too.
type responsesRequest struct {
	server.SamplingFields
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Tools              json.RawMessage   `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Text               json.RawMessage   `json:"text"`
	Stream             bool              `json:"stream"`
	Store              *bool             `json:"store"`
	Metadata           map[string]string `json:"metadata"`
	User               string            `json:"user"`
	PreviousResponseID string            `json:"previous_response_id"`
	ChatTemplateKwargs map[string]any    `json:"chat_template_kwargs"`

	// Fields of the Responses API this server does not implement; a value that asks for one
	// is a 400 naming it (checkUnsupported).
	Background   json.RawMessage `json:"background"`
	Include      json.RawMessage `json:"include"`
	Truncation   json.RawMessage `json:"truncation"`
	Reasoning    json.RawMessage `json:"reasoning"`
	Prompt       json.RawMessage `json:"prompt"`
	Conversation json.RawMessage `json:"conversation"`
	TopLogprobs  json.RawMessage `json:"top_logprobs"`
	MaxToolCalls json.RawMessage `json:"max_tool_calls"`

	api *api // the routes it came in on (their store)
}

func (s *api) handleResponses(w http.ResponseWriter, r *http.Request) {
	s.ServeCompletion(w, r, &responsesRequest{api: s})
}

func (req *responsesRequest) Prepare(ctx context.Context, _ *server.Server) (server.GenParams, [][]int32, server.Reply, error) {
	s := req.api
	if err := req.check(); err != nil {
		return server.GenParams{}, nil, nil, err
	}
	conv, err := s.responses.history(req.PreviousResponseID)
	if err != nil {
		return server.GenParams{}, nil, nil, err
	}
	input, err := inputMessages(req.Input)
	if err != nil {
		return server.GenParams{}, nil, nil, err
	}
	conv = append(conv, input...)
	if len(conv) > maxResponseItems {
		return server.GenParams{}, nil, nil, server.BadRequest("previous_response_id",
			"the conversation with its previous responses has %d messages, at most %d are allowed: start a new one", len(conv), maxResponseItems)
	}
	cr, err := req.chatRequest(conv)
	if err != nil {
		return server.GenParams{}, nil, nil, err
	}
	if err := s.reasoningEffort(req.Reasoning, cr); err != nil {
		return server.GenParams{}, nil, nil, err
	}
	g, prompt, err := s.ChatParams(ctx, cr)
	if err != nil {
		return g, nil, nil, responsesParam(err)
	}
	return g, [][]int32{prompt}, newResponsesReply(s, req, g, conv, cr.Reasoning), nil
}

// check refuses what this server does not implement, naming the field, and checks the fields
// chat has no counterpart of.
func (req *responsesRequest) check() error {
	for _, f := range []struct {
		name string
		asks bool
		what string
	}{
		{"background", server.IsTrue(req.Background), "responses run while the request is open"},
		{"include", server.NonEmpty(req.Include), "no extra output (logprobs, reasoning content, tool results) can be included"},
		{"truncation", server.NonEmpty(req.Truncation) && string(bytes.TrimSpace(req.Truncation)) != `"disabled"`,
			"a conversation longer than the context is refused, not cut"},
		{"reasoning.summary", reasoningSummary(req.Reasoning), "the reasoning is returned as it is, not summarized"},
		{"prompt", server.NonEmpty(req.Prompt), "there are no stored prompt templates"},
		{"conversation", server.NonEmpty(req.Conversation), "there is no Conversations API: use previous_response_id"},
		{"top_logprobs", server.Positive(req.TopLogprobs), "log-probabilities are only on the chat and completions routes"},
		{"max_tool_calls", server.NonEmpty(req.MaxToolCalls), "the number of tool calls is not limited (parallel_tool_calls: false gives at most one)"},
	} {
		if f.asks {
			return server.BadRequest(f.name, "%s is not supported by this server: %s", f.name, f.what)
		}
	}
	if req.MaxOutputTokens != nil && *req.MaxOutputTokens < 1 {
		return server.BadRequest("max_output_tokens", "max_output_tokens must be >= 1, got %d", *req.MaxOutputTokens)
	}
	if len(req.Metadata) > maxMetadataPairs {
		return server.BadRequest("metadata", "metadata has %d pairs, at most %d are allowed", len(req.Metadata), maxMetadataPairs)
	}
	for k, v := range req.Metadata {
		if utf8.RuneCountInString(k) > maxMetadataKeyLen || utf8.RuneCountInString(v) > maxMetadataValueLen {
			return server.BadRequest("metadata", "metadata keys are at most %d characters and values %d", maxMetadataKeyLen, maxMetadataValueLen)
		}
	}
	return nil
}

// reasoningFields is the request's reasoning object.
type reasoningFields struct {
	Effort                   *string
	Summary, GenerateSummary json.RawMessage
}

// reasoningSummary reports whether reasoning asks for a summary (null or {} do not).
func reasoningSummary(raw json.RawMessage) bool {
	var r reasoningFields
	return server.NonEmpty(raw) && (json.Unmarshal(raw, &r) != nil || !server.IsNull(r.Summary) || !server.IsNull(r.GenerateSummary))
}

// reasoningEffort maps reasoning.effort onto the chat template's thinking switch, as Ollama's
// think levels are: "none" and "minimal" turn thinking off (enable_thinking false), "low",
// "medium" and "high" turn it on and pass the level as the template's reasoning_effort (what
// vLLM and llama-server hand gpt-oss's template). Turning it on is a 400 for a template without
// the switch, as OpenAI refuses an effort on a model that does not reason. The request's own
// chat_template_kwargs win over the switch's.
func (s *api) reasoningEffort(raw json.RawMessage, cr *server.ChatRequest) error {
	var r reasoningFields
	if !server.NonEmpty(raw) {
		return nil
	}
	if json.Unmarshal(raw, &r) != nil {
		return server.BadRequest("reasoning", "reasoning must be an object such as {\"effort\": \"low\"}")
	}
	if r.Effort == nil {
		return nil
	}
	return s.ApplyEffort("reasoning.effort", *r.Effort, cr)
}

// chatRequest is the chat request that generates this response: conv (the previous
// responses' messages and the input's) behind the instructions as a system message.
func (req *responsesRequest) chatRequest(conv []map[string]any) (*server.ChatRequest, error) {
	cr := &server.ChatRequest{SamplingFields: req.SamplingFields, ParallelToolCalls: req.ParallelToolCalls,
		ChatTemplateKwargs: req.ChatTemplateKwargs}
	cr.Model, cr.Stream, cr.User, cr.MaxCompletionTokens = req.Model, req.Stream, req.User, req.MaxOutputTokens
	msgs := conv
	if req.Instructions != nil && *req.Instructions != "" {
		// Instructions are not part of the stored conversation: OpenAI does not carry them over
		// to a response that continues this one.
		msgs = append([]map[string]any{{"role": "system", "content": *req.Instructions}}, conv...)
	}
	var err error
	if cr.Messages, err = json.Marshal(msgs); err != nil {
		return nil, server.InternalError(err)
	}
	if cr.Tools, err = chatTools(req.Tools); err != nil {
		return nil, err
	}
	if cr.ToolChoice, err = chatToolChoice(req.ToolChoice); err != nil {
		return nil, err
	}
	if cr.ResponseFormat, err = textFormat(req.Text); err != nil {
		return nil, err
	}
	return cr, nil
}

// responsesParam renames the chat field an error names (param and message) to the Responses
// field it came from.
func responsesParam(err error) error {
	ae := server.ToAPIError(err)
	p := ae.Param
	switch {
	case p == "messages":
		p = "input"
	case p == "max_completion_tokens":
		p = "max_output_tokens"
	case p == "response_format":
		p = "text.format"
	case strings.HasPrefix(p, "tools[") && strings.Contains(p, "].function."):
		p = strings.Replace(p, "].function.", "].", 1)
	}
	if p == ae.Param {
		return ae
	}
	renamed := *ae
	renamed.Param, renamed.Message = p, strings.ReplaceAll(ae.Message, ae.Param, p)
	return &renamed
}

// inputItem is one item of a list input: a message (type "message" or absent), a
// function_call the model made, or the function_call_output the client answers it with.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// inputMessages turns input, a string (one user message) or a list of items, into chat
// messages. A function_call item joins the assistant message before it (the calls of one turn
// are one assistant message with tool_calls), a function_call_output is a tool message.
func inputMessages(raw json.RawMessage) ([]map[string]any, error) {
	if server.IsNull(raw) {
		return nil, server.BadRequest("input", "input is required: a string or a list of input items")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []map[string]any{{"role": "user", "content": text}}, nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, server.BadRequest("input", "input must be a string or a list of input items")
	}
	if len(items) == 0 {
		return nil, server.BadRequest("input", "input is an empty list")
	}
	if len(items) > maxResponseItems {
		return nil, server.BadRequest("input", "input has %d items, at most %d are allowed", len(items), maxResponseItems)
	}
	msgs := make([]map[string]any, 0, len(items))
	for i, el := range items {
		var it inputItem
		if err := json.Unmarshal(el, &it); err != nil {
			return nil, server.BadRequest(fmt.Sprintf("input[%d]", i), "input[%d] must be an input item object: %v", i, err)
		}
		field := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			m, err := inputMessage(field, it)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, server.BadRequest(field, "%s: a function_call item needs call_id and name", field)
			}
			call := map[string]any{"id": it.CallID, "type": "function",
				"function": map[string]any{"name": it.Name, "arguments": it.Arguments}}
			if n := len(msgs); n > 0 && msgs[n-1]["role"] == "assistant" {
				calls, _ := msgs[n-1]["tool_calls"].([]any)
				msgs[n-1]["tool_calls"] = append(calls, call)
				continue
			}
			msgs = append(msgs, map[string]any{"role": "assistant", "content": "", "tool_calls": []any{call}})
		case "function_call_output":
			if it.CallID == "" {
				return nil, server.BadRequest(field, "%s: a function_call_output item needs call_id", field)
			}
			out, err := partsText(field+".output", it.Output)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": it.CallID, "content": out})
		default:
			return nil, server.BadRequest(field+".type", "%s.type %s is not supported: this server takes message, function_call and function_call_output items", field, server.Echo(it.Type))
		}
	}
	return msgs, nil
}

// inputMessage is a message item as a chat message; developer instructions are a system
// message, as chat templates know no developer role.
func inputMessage(field string, it inputItem) (map[string]any, error) {
	role := it.Role
	switch role {
	case "user", "system", "assistant":
	case "developer":
		role = "system"
	case "":
		return nil, server.BadRequest(field+".role", "%s has no role", field)
	default:
		return nil, server.BadRequest(field+".role", "%s.role %s: use user, system, developer or assistant", field, server.Echo(role))
	}
	text, err := partsText(field+".content", it.Content)
	if err != nil {
		return nil, err
	}
	return map[string]any{"role": role, "content": text}, nil
}

// partsText is a message's content (or a function_call_output's output): a string, or a list
// of text parts, joined. Images, files and audio are refused.
func partsText(field string, raw json.RawMessage) (string, error) {
	if server.IsNull(raw) {
		return "", server.BadRequest(field, "%s is required", field)
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return text, nil
	}
	var parts []struct {
		Type    string  `json:"type"`
		Text    *string `json:"text"`
		Refusal *string `json:"refusal"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", server.BadRequest(field, "%s must be a string or a list of content parts", field)
	}
	var sb strings.Builder
	for j, p := range parts {
		switch {
		case (p.Type == "input_text" || p.Type == "output_text" || p.Type == "text") && p.Text != nil:
			sb.WriteString(*p.Text)
		case p.Type == "refusal" && p.Refusal != nil:
			sb.WriteString(*p.Refusal)
		case p.Type == "input_image" || p.Type == "input_file" || p.Type == "input_audio":
			return "", server.BadRequest(fmt.Sprintf("%s[%d]", field, j), "%s[%d] is of type %s: this server takes text only (no images, files or audio)", field, j, p.Type)
		default:
			return "", server.BadRequest(fmt.Sprintf("%s[%d]", field, j), "%s[%d]: a part of type %s with its text is expected (input_text or output_text)", field, j, server.Echo(p.Type))
		}
	}
	return sb.String(), nil
}

// chatTools turns the Responses API's flat function tools ({"type": "function", "name": ...,
// "parameters": ...}) into chat's ({"type": "function", "function": {...}}), every other key
// kept (the template shows the description). Built-in tools are refused.
func chatTools(raw json.RawMessage) (json.RawMessage, error) {
	if server.IsNull(raw) {
		return nil, nil
	}
	var tools []map[string]json.RawMessage
	if json.Unmarshal(raw, &tools) != nil {
		return nil, server.BadRequest("tools", `tools must be a list of {"type": "function", "name": ..., "parameters": ...} objects`)
	}
	if len(tools) == 0 {
		return nil, nil
	}
	out := make([]map[string]any, len(tools))
	for i, t := range tools {
		var typ string
		json.Unmarshal(t["type"], &typ)
		if typ != "function" {
			return nil, server.BadRequest(fmt.Sprintf("tools[%d].type", i),
				"tools[%d].type %q is not supported: this server runs function tools only (no built-in tools such as web_search or file_search)", i, typ)
		}
		fn := make(map[string]json.RawMessage, len(t))
		for k, v := range t {
			if k != "type" {
				fn[k] = v
			}
		}
		out[i] = map[string]any{"type": "function", "function": fn}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, server.InternalError(err)
	}
	return b, nil
}

// chatToolChoice turns the Responses API's tool_choice into chat's: the strings are the same,
// a named function is {"type": "function", "name": ...} instead of chat's nested object.
func chatToolChoice(raw json.RawMessage) (json.RawMessage, error) {
	if server.IsNull(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return raw, nil // none, auto, required; chat refuses anything else, naming tool_choice
	}
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != "function" || named.Name == "" {
		return nil, server.BadRequest("tool_choice", `tool_choice must be none, auto, required or {"type": "function", "name": ...} (no built-in tools, no allowed_tools)`)
	}
	return json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": named.Name}})
}

// textFormat turns text.format into chat's response_format (nil for plain text); verbosity
// other than medium is refused, as nothing here changes it.
func textFormat(raw json.RawMessage) (json.RawMessage, error) {
	if server.IsNull(raw) {
		return nil, nil
	}
	var t struct {
		Format    json.RawMessage `json:"format"`
		Verbosity *string         `json:"verbosity"`
	}
	if json.Unmarshal(raw, &t) != nil {
		return nil, server.BadRequest("text", `text must be an object like {"format": {"type": "json_object"}}`)
	}
	if t.Verbosity != nil && *t.Verbosity != "medium" {
		return nil, server.BadRequest("text.verbosity", "text.verbosity %s is not supported: the model has no verbosity to set", server.Echo(*t.Verbosity))
	}
	if server.IsNull(t.Format) {
		return nil, nil
	}
	var f struct {
		Type   string          `json:"type"`
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	}
	if json.Unmarshal(t.Format, &f) != nil {
		return nil, server.BadRequest("text.format", `text.format must be an object like {"type": "json_schema", "schema": {...}}`)
	}
	switch f.Type {
	case "text":
		return nil, nil
	case "json_object":
		return json.RawMessage(`{"type": "json_object"}`), nil
	case "json_schema":
		if server.IsNull(f.Schema) {
			return nil, server.BadRequest("text.format.schema", "text.format of type json_schema needs schema")
		}
		return json.Marshal(map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": f.Name, "schema": f.Schema, "strict": f.Strict}})
	}
	return nil, server.BadRequest("text.format.type", "text.format.type %s: use text, json_object or json_schema", server.Echo(f.Type))
}
