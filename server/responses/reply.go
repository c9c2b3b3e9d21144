package responses

import (
	"crypto/rand"
	"encoding/json"
	"strings"
	"time"

	"ubatch/chat"
	"ubatch/server"
)

// responseObject is the Responses API's response: the whole answer without streaming, and the
// snapshot in the stream's response.created, response.completed (...) events.
type responseObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"` // in_progress, completed, incomplete, failed
	Error              *responseError     `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []any              `json:"output"` // *messageItem and *functionCallItem
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Reasoning          struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
	} `json:"reasoning"`
	Store       bool              `json:"store"`
	Temperature float64           `json:"temperature"`
	Text        responseText      `json:"text"`
	ToolChoice  json.RawMessage   `json:"tool_choice"`
	Tools       json.RawMessage   `json:"tools"`
	TopP        float64           `json:"top_p"`
	Truncation  string            `json:"truncation"`
	Usage       *responseUsage    `json:"usage"`
	User        *string           `json:"user,omitempty"`
	Metadata    map[string]string `json:"metadata"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type responseText struct {
	Format json.RawMessage `json:"format"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// messageItem is an output message; its content is one output_text part.
type messageItem struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

// functionCallItem is a call of one of the request's tools; call_id is what the client's
// function_call_output answers.
type functionCallItem struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Status    string `json:"status"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// responsesReply words a generation as the Responses API does: the whole response, or its
// stream of typed events (stream.go). A finished response is kept in the server's
// store, with its conversation, for previous_response_id and GET /v1/responses/{id}.
type responsesReply struct {
	s      *api
	g      server.GenParams
	resp   responseObject
	conv   []map[string]any // the conversation this response answers (no instructions)
	store  bool
	parser *chat.ToolParser    // with tools, streaming
	calls  []*functionCallItem // streaming: the calls started, in order

	reasoning   server.ReasoningMode  // how the reply is read for its thought
	thinking    *chat.ReasoningParser // streaming, with reasoning.split
	thought     *reasoningItem        // the reasoning output item, once there is a thought
	thoughtText strings.Builder       // streaming: the thought so far

	// Streaming state.
	seq    int          // the next event's sequence_number
	msg    *messageItem // the output message, once text was sent
	text   strings.Builder
	finish string
	failed bool
}

func newResponsesReply(s *api, req *responsesRequest, g server.GenParams, conv []map[string]any, rm server.ReasoningMode) *responsesReply {
	r := &responsesReply{s: s, g: g, conv: conv, store: req.Store == nil || *req.Store, reasoning: rm}
	if rm.Split && g.Stream {
		r.thinking = chat.NewReasoningParser(rm.InThought)
	}
	o := &r.resp
	o.ID, o.Object, o.CreatedAt, o.Status = "resp_"+rand.Text(), "response", time.Now().Unix(), "in_progress"
	o.Model, o.Output, o.Store, o.Truncation = s.Config().ModelID, []any{}, r.store, "disabled"
	if req.Instructions != nil {
		o.Instructions = req.Instructions
	}
	o.MaxOutputTokens = req.MaxOutputTokens
	o.ParallelToolCalls = req.ParallelToolCalls == nil || *req.ParallelToolCalls
	if req.PreviousResponseID != "" {
		o.PreviousResponseID = &req.PreviousResponseID
	}
	var rf reasoningFields
	if server.NonEmpty(req.Reasoning) && json.Unmarshal(req.Reasoning, &rf) == nil {
		o.Reasoning.Effort = rf.Effort
	}
	o.Temperature, o.TopP = 1, 1
	if req.Temperature != nil {
		o.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		o.TopP = *req.TopP
	}
	o.Text.Format = json.RawMessage(`{"type": "text"}`)
	var text struct {
		Format json.RawMessage `json:"format"`
	}
	if json.Unmarshal(req.Text, &text) == nil && !server.IsNull(text.Format) {
		o.Text.Format = text.Format
	}
	o.ToolChoice, o.Tools = json.RawMessage(`"auto"`), json.RawMessage(`[]`)
	if !server.IsNull(req.ToolChoice) {
		o.ToolChoice = req.ToolChoice
	}
	if !server.IsNull(req.Tools) {
		o.Tools = req.Tools
	}
	if req.User != "" {
		o.User = &req.User
	}
	o.Metadata = req.Metadata
	if o.Metadata == nil {
		o.Metadata = map[string]string{}
	}
	if g.Tools != nil && g.Stream {
		r.parser = chat.NewToolParser(g.Tools.Format, g.Tools.Names)
		r.parser.StreamCalls()
	}
	return r
}

func (r *responsesReply) Whole(res []*server.ChoiceResult, u server.UsageJSON) any {
	text := r.splitWhole(res[0].Text.String())
	var calls []chat.ToolCall
	if r.g.Tools != nil {
		text, calls = chat.ParseToolCalls(r.g.Tools.Format, text, r.g.Tools.Names)
	}
	if text != "" || len(calls) == 0 {
		r.openMessage()
		r.msg.Content[0].Text = text
	}
	r.addCalls(calls)
	r.settle(res[0].Finish)
	r.finishUsage(u)
	return &r.resp
}

// openMessage starts the output message, in front of any function call.
func (r *responsesReply) openMessage() {
	r.msg = &messageItem{ID: "msg_" + rand.Text(), Type: "message", Status: "in_progress", Role: "assistant",
		Content: []outputText{{Type: "output_text", Annotations: []any{}}}}
	r.resp.Output = append(r.resp.Output, r.msg)
}

// addCalls appends the parsed calls (the first only without parallel_tool_calls) as
// function_call items and returns them.
func (r *responsesReply) addCalls(calls []chat.ToolCall) []*functionCallItem {
	var items []*functionCallItem
	for _, c := range server.ToolReply(calls, r.g.Tools != nil && r.g.Tools.Parallel, false) {
		it := &functionCallItem{ID: "fc_" + rand.Text(), Type: "function_call", Status: "completed",
			CallID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments}
		r.resp.Output = append(r.resp.Output, it)
		items = append(items, it)
	}
	return items
}

// settle sets the final status from the generation's finish: cut by max_output_tokens (or
// the context) is incomplete, unless the output ended in tool calls.
func (r *responsesReply) settle(finish string) {
	o := &r.resp
	o.Status = "completed"
	calls := false
	for _, it := range o.Output {
		_, isCall := it.(*functionCallItem)
		calls = calls || isCall
	}
	if finish == "length" && !calls {
		o.Status, o.IncompleteDetails = "incomplete", &incompleteDetails{Reason: "max_output_tokens"}
	}
	if r.msg != nil {
		r.msg.Status = o.Status
	}
}

// finishUsage sets the usage of the settled response and keeps it in the store.
func (r *responsesReply) finishUsage(u server.UsageJSON) {
	o := &r.resp
	o.Usage = &responseUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	o.Usage.InputTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
	if r.store {
		r.s.responses.put(o, append(r.conv, r.assistantMessage()))
	}
}

// assistantMessage is the response's output as the chat message a following response sees in
// its conversation.
func (r *responsesReply) assistantMessage() map[string]any {
	m := map[string]any{"role": "assistant", "content": ""}
	if r.msg != nil {
		m["content"] = r.msg.Content[0].Text
	}
	var calls []any
	for _, it := range r.resp.Output {
		if c, ok := it.(*functionCallItem); ok {
			calls = append(calls, map[string]any{"id": c.CallID, "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
	}
	if calls != nil {
		m["tool_calls"] = calls
	}
	return m
}
