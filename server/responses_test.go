package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// responseResult decodes a response object as a client reads it.
type responseResult struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Status            string `json:"status"`
	Model             string `json:"model"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	PreviousResponseID *string `json:"previous_response_id"`
	Instructions       *string `json:"instructions"`
	Output             []struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Status  string `json:"status"`
		Role    string `json:"role"`
		Content []struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			Annotations []any  `json:"annotations"`
		} `json:"content"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"output"`
	Usage *struct {
		InputTokens        int `json:"input_tokens"`
		OutputTokens       int `json:"output_tokens"`
		TotalTokens        int `json:"total_tokens"`
		InputTokensDetails struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

// text is the output message's text ("" without one).
func (r *responseResult) text() string {
	var sb strings.Builder
	for _, o := range r.Output {
		if o.Type == "message" {
			for _, c := range o.Content {
				sb.WriteString(c.Text)
			}
		}
	}
	return sb.String()
}

// respond posts a /v1/responses body and decodes the 200 answer.
func (e *testEnv) respond(body map[string]any) responseResult {
	e.t.Helper()
	var r responseResult
	e.postJSON("/v1/responses", body, http.StatusOK, &r)
	if r.Object != "response" || !strings.HasPrefix(r.ID, "resp_") || r.Usage == nil ||
		r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens || r.Usage.InputTokensDetails.CachedTokens == nil {
		e.t.Fatalf("not a response object: %+v", r)
	}
	return r
}

// namedEvent is one event of a Responses stream: its event: name and its data.
type namedEvent struct {
	name string
	data map[string]any
}

// streamResponse posts body with stream: true and returns the events, checking that each
// event's name is its data's type and that sequence numbers count from 0.
func (e *testEnv) streamResponse(body map[string]any) []namedEvent {
	e.t.Helper()
	body["stream"] = true
	resp := e.post(context.Background(), "/v1/responses", body)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		data, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("status %d (%s): %s", resp.StatusCode, resp.Header.Get("Content-Type"), data)
	}
	var events []namedEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				e.t.Fatalf("event %s: %v", line, err)
			}
			if d["type"] != name || d["sequence_number"] != float64(len(events)) {
				e.t.Fatalf("event %d named %q: %s", len(events), name, line)
			}
			events = append(events, namedEvent{name, d})
			name = ""
		default:
			e.t.Fatalf("unexpected SSE line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		e.t.Fatal(err)
	}
	return events
}

// chatAnswer is the prompt size and the text /v1/chat/completions gives msgs (and tools) at
// temperature 0 within maxTokens.
func (e *testEnv) chatAnswer(msgs []map[string]any, tools []any, maxTokens int) (int, string) {
	e.t.Helper()
	body := map[string]any{"messages": msgs, "max_tokens": maxTokens, "temperature": 0}
	if tools != nil {
		body["tools"] = tools
	}
	var r struct {
		Choices []struct {
			Message struct {
				Content *string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage usageJSON `json:"usage"`
	}
	e.postJSON("/v1/chat/completions", body, http.StatusOK, &r)
	return r.Usage.PromptTokens, deref(r.Choices[0].Message.Content)
}

// weather is a tool in the Responses API's flat shape and in chat's.
var (
	weatherParams = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}},
		"required": []any{"city"}}
	weatherFlat = map[string]any{"type": "function", "name": "get_weather", "description": "The weather in a city", "parameters": weatherParams}
	weatherChat = map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "description": "The weather in a city", "parameters": weatherParams}}
)

// TestResponsesInput: each input shape renders as the chat messages it stands for: the prompt
// has as many tokens as /v1/chat/completions gives those messages, and the greedy text is the
// same.
func TestResponsesInput(t *testing.T) {
	e := newEnv(t, envOptions{nCtx: 2048})
	call := []any{map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}
	tests := []struct {
		name  string
		body  map[string]any
		chat  []map[string]any
		tools []any
	}{
		{name: "string", body: map[string]any{"input": "Once upon a time"},
			chat: []map[string]any{{"role": "user", "content": "Once upon a time"}}},
		{name: "instructions", body: map[string]any{"input": "Once upon a time", "instructions": "Tell a story."},
			chat: []map[string]any{{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "Once upon a time"}}},
		{name: "input_text parts", body: map[string]any{"input": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "input_text", "text": "Once "}, map[string]any{"type": "input_text", "text": "upon a time"}}}}},
			chat: []map[string]any{{"role": "user", "content": "Once upon a time"}}},
		{name: "developer, history with output_text", body: map[string]any{"input": []any{
			map[string]any{"role": "developer", "content": "Tell stories."},
			map[string]any{"type": "message", "role": "user", "content": "Hi"},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "Hello."}}},
			map[string]any{"role": "user", "content": "A story?"}}},
			chat: []map[string]any{{"role": "system", "content": "Tell stories."}, {"role": "user", "content": "Hi"},
				{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "A story?"}}},
		{name: "function_call and its output, flat tools", body: map[string]any{"tools": []any{weatherFlat}, "input": []any{
			map[string]any{"role": "user", "content": "Weather?"},
			map[string]any{"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": `{"city":"Paris"}`},
			map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "22C"}}},
			chat: []map[string]any{{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": call},
				{"role": "tool", "tool_call_id": "call_1", "content": "22C"}},
			tools: []any{weatherChat}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.body["max_output_tokens"], tt.body["temperature"] = 6, 0
			r := e.respond(tt.body)
			prompt, text := e.chatAnswer(tt.chat, tt.tools, 6)
			if r.Usage.InputTokens != prompt || r.text() != text || text == "" {
				t.Fatalf("input_tokens %d, text %q; chat: prompt %d, text %q", r.Usage.InputTokens, r.text(), prompt, text)
			}
			if r.Status != "incomplete" && r.Status != "completed" || r.Usage.OutputTokens < 1 || r.Model != "stories" {
				t.Fatalf("%+v", r)
			}
			if tt.body["instructions"] != nil && deref(r.Instructions) != tt.body["instructions"] {
				t.Errorf("instructions %v not echoed", r.Instructions)
			}
		})
	}
	// The route is served without /v1 too.
	var r responseResult
	e.postJSON("/responses", map[string]any{"input": "Hi", "max_output_tokens": 2}, http.StatusOK, &r)
	if r.Object != "response" {
		t.Errorf("/responses: %+v", r)
	}
}

// TestResponsesStatus: a reply cut by max_output_tokens is incomplete (reason
// max_output_tokens, its message too), one the grammar ends is completed, streamed or not.
func TestResponsesStatus(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name       string
		body       map[string]any
		status     string
		reason     string
		outputToks int // 0: not checked
		text       string
	}{
		{name: "cut", body: map[string]any{"input": "Once upon a time", "max_output_tokens": 3, "ignore_eos": true},
			status: "incomplete", reason: "max_output_tokens", outputToks: 3},
		{name: "ended", body: map[string]any{"input": "Once upon a time", "max_output_tokens": 30, "grammar": `root ::= "Once"`},
			status: "completed", text: "Once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.body["temperature"] = 0
			r := e.respond(tt.body)
			reason := ""
			if r.IncompleteDetails != nil {
				reason = r.IncompleteDetails.Reason
			}
			if r.Status != tt.status || reason != tt.reason || len(r.Output) != 1 || r.Output[0].Status != tt.status ||
				tt.outputToks > 0 && r.Usage.OutputTokens != tt.outputToks || tt.text != "" && r.text() != tt.text {
				t.Fatalf("%+v, want status %s (%q)", r, tt.status, tt.reason)
			}
			events := e.streamResponse(tt.body)
			last := events[len(events)-1]
			want := map[string]string{"completed": "response.completed", "incomplete": "response.incomplete"}[tt.status]
			resp, _ := last.data["response"].(map[string]any)
			if last.name != want || resp["status"] != tt.status {
				t.Fatalf("last event %s %v, want %s", last.name, last.data, want)
			}
		})
	}
}
