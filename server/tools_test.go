package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

var weatherTool = []map[string]any{{
	"type": "function",
	"function": map[string]any{
		"name": "get_weather",
		"parameters": map[string]any{
			"type":       "object",
			"properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}},
			"required":   []string{"city"},
		},
	},
}}

// TestToolCallsForced: with tool_choice required (and a named function) the grammar makes even
// the tiny story model call the tool; the reply carries OpenAI tool_calls whose arguments follow
// the parameters' schema, non-streamed and as streamed deltas.
func TestToolCallsForced(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, choice := range []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}} {
		body := map[string]any{
			"messages":    []map[string]string{{"role": "user", "content": "What is the weather in Paris?"}},
			"tools":       weatherTool,
			"tool_choice": choice,
			"max_tokens":  96,
			"temperature": 0,
		}
		var resp struct {
			Choices []struct {
				Message struct {
					Content   *string        `json:"content"`
					ToolCalls []toolCallJSON `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		e.postJSON("/v1/chat/completions", body, http.StatusOK, &resp)
		if len(resp.Choices) != 1 || len(resp.Choices[0].Message.ToolCalls) != 1 {
			t.Fatalf("%v: want one tool call, got %+v", choice, resp)
		}
		c := resp.Choices[0]
		call := c.Message.ToolCalls[0]
		var args struct {
			City *string `json:"city"`
		}
		if call.Function.Name != "get_weather" || json.Unmarshal([]byte(call.Function.Arguments), &args) != nil || args.City == nil ||
			call.Type != "function" || !strings.HasPrefix(call.ID, "call_") || c.FinishReason != "tool_calls" || c.Message.Content != nil {
			t.Errorf("%v: call %+v, finish %q, content %v", choice, call, c.FinishReason, c.Message.Content)
		}

		body["stream"] = true
		stream := e.post(context.Background(), "/v1/chat/completions", body)
		events := sseEvents(t, stream.Body)
		stream.Body.Close()
		var got []toolCallJSON
		finish := ""
		for _, ev := range events {
			var chunk struct {
				Choices []struct {
					Delta struct {
						Content   *string        `json:"content"`
						ToolCalls []toolCallJSON `json:"tool_calls"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
			}
			if ev == "[DONE]" || json.Unmarshal([]byte(ev), &chunk) != nil || len(chunk.Choices) == 0 {
				continue
			}
			d := chunk.Choices[0]
			if d.Delta.Content != nil && strings.Contains(*d.Delta.Content, "<tool_call>") {
				t.Errorf("the tool-call markup leaked into the streamed content: %q", *d.Delta.Content)
			}
			got = append(got, d.Delta.ToolCalls...)
			if d.FinishReason != nil {
				finish = *d.FinishReason
			}
		}
		if len(got) != 1 || got[0].Function.Name != "get_weather" || got[0].Function.Arguments != call.Function.Arguments || got[0].Index == nil || finish != "tool_calls" {
			t.Errorf("%v: streamed calls %+v, finish %q; non-streamed %+v", choice, got, finish, call)
		}
	}
}

func TestToolRequests(t *testing.T) {
	e := newEnv(t, envOptions{})
	// A tool result sent back: the assistant's call (arguments as JSON text) and the tool's
	// answer render through the template.
	var resp map[string]any
	e.postJSON("/v1/chat/completions", map[string]any{
		"messages": []map[string]any{
			{"role": "user", "content": "Weather in Paris?"},
			{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": "call_1", "type": "function",
				"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}},
			{"role": "tool", "tool_call_id": "call_1", "content": "22C"},
		},
		"tools": weatherTool, "max_tokens": 4,
	}, http.StatusOK, &resp)
	for _, tc := range []struct{ name, body, param string }{
		{"choice without tools", `{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, "tool_choice"},
		{"unknown choice", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"always"}`, "tool_choice"},
		{"named function absent", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice"},
		{"bad tools", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"retrieval"}]}`, "tools"},
		{"forced plus schema", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","response_format":{"type":"json_object"}}`, "tool_choice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.post(context.Background(), "/v1/chat/completions", tc.body)
			defer r.Body.Close()
			d := checkError(t, r, http.StatusBadRequest, "invalid_request_error")
			if d.Param == nil || *d.Param != tc.param {
				t.Errorf("param %v, want %q (%s)", d.Param, tc.param, d.Message)
			}
		})
	}
}
