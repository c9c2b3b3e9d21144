package server

import (
	"encoding/json"
	"testing"

	"ubatch/chat"
	"ubatch/internal/testdata"
)

// TestToolCallsStreamedDeltas: a forced call (tool_choice required, so the grammar writes it)
// streams as llama-server and vLLM stream one, in each format, picked by the chat template: a
// chunk with the call's id, type and name, then its arguments in fragments, in three or more
// chunks in all, which join into valid JSON equal to the non-streamed call's arguments.
func TestToolCallsStreamedDeltas(t *testing.T) {
	tool := []map[string]any{{
		"type": "function",
		"function": map[string]any{
			"name": "get_weather",
			"parameters": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"city": map[string]any{"type": "string", "maxLength": 12},
					"days": map[string]any{"type": "integer"},
				},
				"required": []string{"city", "days"},
			},
		},
	}}
	for _, tc := range []struct {
		name     string
		template string // under ../shared/templates; "": the model's (none: ChatML)
		format   chat.ToolFormat
	}{
		{"hermes (ChatML fallback)", "", chat.ToolHermes},
		{"hermes (Qwen3)", "Qwen-Qwen3-0.6B.jinja", chat.ToolHermes},
		{"llama3", "meta-llama-Llama-3.1-8B-Instruct.jinja", chat.ToolLlama3},
		{"mistral", "mistralai-Mistral-Nemo-Instruct-2407.jinja", chat.ToolMistral},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := envOptions{nCtx: toolsNCtx}
			if tc.template != "" {
				o.chatTemplate = string(testdata.ReadFile(t, "templates/"+tc.template))
			}
			e := newEnv(t, o)
			if f := chat.DetectToolFormat(e.srv.tmpl.Source()); f != tc.format {
				t.Fatalf("the template's format is %v, want %v", f, tc.format)
			}
			body := func() map[string]any {
				return map[string]any{
					"messages":    []map[string]string{{"role": "user", "content": "What is the weather in Paris?"}},
					"tools":       tool,
					"tool_choice": "required",
					"max_tokens":  120,
					"temperature": 0,
				}
			}
			w := e.chatWhole(body())
			if len(w.Message.ToolCalls) != 1 || w.FinishReason != "tool_calls" {
				t.Fatalf("non-streamed: %+v, want one call", w)
			}
			want := w.Message.ToolCalls[0]
			s := e.streamChat(body())
			var args map[string]any
			if len(s.calls) != 1 || s.calls[0].Function.Name != "get_weather" || s.finish != "tool_calls" {
				t.Fatalf("streamed: calls %+v finish %q", s.calls, s.finish)
			}
			got := s.calls[0].Function.Arguments
			if s.callChunks < 3 || got != want.Function.Arguments || json.Unmarshal([]byte(got), &args) != nil {
				t.Errorf("streamed: %d tool-call chunks joining into %q, want 3 or more joining into valid JSON equal to %q", s.callChunks, got, want.Function.Arguments)
			}
			if s.content.Len() > 0 {
				t.Errorf("streamed: content %q beside the call", s.content.String())
			}
		})
	}
}

// TestToolCallCutSameStreamed: a forced call cut by max_tokens reads the same streamed and not:
// for every max_tokens up to the whole call, the same content, the same calls (a call cut inside
// its arguments is the call with the arguments written so far, as OpenAI returns it and as the
// stream has sent it) and finish_reason "length" while cut; one of them is cut inside the
// arguments, so the case is exercised.
func TestToolCallCutSameStreamed(t *testing.T) {
	e := newEnv(t, envOptions{nCtx: toolsNCtx})
	body := func(n int) map[string]any {
		return map[string]any{
			"messages":    []map[string]string{{"role": "user", "content": "What is the weather in Paris?"}},
			"tools":       weatherTool,
			"tool_choice": "required",
			"max_tokens":  n,
			"temperature": 0,
		}
	}
	insideArgs := false
	for n := 1; n <= 80; n++ {
		w := e.chatWhole(body(n))
		s := e.streamChat(body(n))
		content := ""
		if w.Message.Content != nil {
			content = *w.Message.Content
		}
		if w.FinishReason != s.finish || content != s.content.String() || len(w.Message.ToolCalls) != len(s.calls) {
			t.Fatalf("max_tokens %d: non-streamed %+v (content %q), streamed calls %+v content %q finish %q",
				n, w, content, s.calls, s.content.String(), s.finish)
		}
		for i, c := range w.Message.ToolCalls {
			if c.Function.Name != s.calls[i].Function.Name || c.Function.Arguments != s.calls[i].Function.Arguments {
				t.Fatalf("max_tokens %d: call %d is %+v non-streamed, %+v streamed", n, i, c.Function, s.calls[i].Function)
			}
		}
		if w.FinishReason != "length" {
			if w.FinishReason != "tool_calls" || len(w.Message.ToolCalls) != 1 {
				t.Fatalf("max_tokens %d: the whole call ends with %q and %d calls, want tool_calls and one", n, w.FinishReason, len(w.Message.ToolCalls))
			}
			break
		}
		if len(w.Message.ToolCalls) == 1 && !json.Valid([]byte(w.Message.ToolCalls[0].Function.Arguments)) {
			insideArgs = true
		}
	}
	if !insideArgs {
		t.Errorf("no max_tokens cut the call inside its arguments: the case is not exercised")
	}
}
