package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"ubatch/chat"
	"ubatch/internal/testdata"
)

// harmonyGrammar makes a model write harmony as gpt-oss does: a thought on the analysis
// channel, then the answer on the final one (stories260K spells the markers in characters;
// gpt-oss's vocabulary prints its special tokens as the same text).
const harmonyGrammar = `root ::= "<|channel|>analysis<|message|>" [a-z] [a-z ]{2,24} "<|end|><|start|>assistant<|channel|>final<|message|>" [a-z] [a-z ]{2,24}`

func gptOSSEnv(t *testing.T) *testEnv {
	return newEnv(t, envOptions{nCtx: toolsNCtx, chatTemplate: string(testdata.ReadFile(t, "templates/openai-gpt-oss-120b.jinja"))})
}

// harmonyParts cuts the grammar's reply into its thought and its answer.
func harmonyParts(t *testing.T, raw string) (thought, answer string) {
	t.Helper()
	rest, ok := strings.CutPrefix(raw, "<|channel|>analysis<|message|>")
	thought, answer, ok2 := strings.Cut(rest, "<|end|><|start|>assistant<|channel|>final<|message|>")
	if !ok || !ok2 || thought == "" || answer == "" {
		t.Fatalf("reasoning_format none: content %q, want the grammar's harmony", raw)
	}
	return thought, answer
}

// TestChatHarmony: with gpt-oss's template, a harmony reply's analysis channel is
// reasoning_content and its final channel content, streamed (the thought as deltas before the
// answer, no markup in any delta) and not; reasoning_format none leaves the text as written.
func TestChatHarmony(t *testing.T) {
	e := gptOSSEnv(t)
	if f := chat.DetectReasoningFormat(e.srv.tmpl.Source()); f != chat.ReasoningHarmony {
		t.Fatalf("gpt-oss's template reads as %v", f)
	}
	body := func(format string) map[string]any {
		b := map[string]any{"messages": []map[string]string{{"role": "user", "content": "Think, then tell me a story."}},
			"max_tokens": 400, "temperature": 0, "grammar": harmonyGrammar}
		if format != "" {
			b["reasoning_format"] = format
		}
		return b
	}
	raw := deref(e.chatWhole(body("none")).Message.Content)
	thought, answer := harmonyParts(t, raw)
	for _, tc := range []struct {
		name, format       string
		reasoning, content string
	}{
		{"default", "", thought, answer},
		{"none", "none", "", raw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := e.chatWhole(body(tc.format))
			if deref(w.Message.ReasoningContent) != tc.reasoning || deref(w.Message.Content) != tc.content || w.FinishReason != "stop" {
				t.Errorf("whole: %+v, want reasoning %q content %q", w, tc.reasoning, tc.content)
			}
			s := e.streamChat(body(tc.format))
			if s.reasoning.String() != tc.reasoning || s.content.String() != tc.content || s.finish != "stop" {
				t.Errorf("streamed: reasoning %q content %q finish %q, want %q %q", s.reasoning.String(), s.content.String(), s.finish, tc.reasoning, tc.content)
			}
			if tc.reasoning != "" && (s.reasoningChunks < 2 || s.contentBefore) {
				t.Errorf("streamed: the thought in %d chunks (content before it: %v), want deltas before the answer", s.reasoningChunks, s.contentBefore)
			}
		})
	}
}

// TestChatHarmonyToolCall: a harmony call on the commentary channel is a tool call, streamed
// (name first, then arguments) and not, with finish_reason tool_calls; tool_choice required
// holds the model to one call in harmony's form.
func TestChatHarmonyToolCall(t *testing.T) {
	e := gptOSSEnv(t)
	if f := chat.DetectToolFormat(e.srv.tmpl.Source()); f != chat.ToolHarmony {
		t.Fatalf("gpt-oss's template reads as %v", f)
	}
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "get_weather", "description": "Get the weather.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}},
			"required": []string{"city"}}}}}
	callGrammar := `root ::= "<|channel|>analysis<|message|>" [a-z] [a-z ]{2,20} "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"" [a-z]{1,8} "\"}"`
	for _, tc := range []struct {
		name string
		body map[string]any
		// thought: the reply has a thought (the forced one does; required may or may not)
		thought bool
	}{
		{"auto", map[string]any{"tool_choice": "auto", "grammar": callGrammar}, true},
		{"required", map[string]any{"tool_choice": "required"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := func() map[string]any {
				b := map[string]any{"messages": []map[string]string{{"role": "user", "content": "What is the weather in Paris?"}},
					"tools": tools, "max_tokens": 400, "temperature": 0}
				for k, v := range tc.body {
					b[k] = v
				}
				return b
			}
			w := e.chatWhole(body())
			if len(w.Message.ToolCalls) != 1 || w.FinishReason != "tool_calls" || w.Message.ToolCalls[0].Function.Name != "get_weather" {
				t.Fatalf("non-streamed: %+v, want one get_weather call", w)
			}
			var args struct{ City string }
			if err := json.Unmarshal([]byte(w.Message.ToolCalls[0].Function.Arguments), &args); err != nil || args.City == "" {
				t.Fatalf("arguments %q: %v", w.Message.ToolCalls[0].Function.Arguments, err)
			}
			if c := deref(w.Message.Content); strings.Contains(c, "<|") {
				t.Errorf("content %q holds markup", c)
			}
			if tc.thought && deref(w.Message.ReasoningContent) == "" {
				t.Errorf("no reasoning_content: %+v", w)
			}
			s := e.streamChat(body())
			if len(s.calls) != 1 || s.calls[0].Function != w.Message.ToolCalls[0].Function || s.finish != "tool_calls" ||
				s.reasoning.String() != deref(w.Message.ReasoningContent) || s.callChunks < 2 {
				t.Errorf("streamed: %+v %q in %d chunks, want %+v", s.calls, s.reasoning.String(), s.callChunks, w)
			}
		})
	}
}

// TestHarmonyEffortPrompt: chat's reasoning_effort (Responses' reasoning.effort goes through
// the same ApplyEffort) becomes the system message's Reasoning line (none, which gpt-oss cannot
// do, the least: low), the reply split; a bad effort is a 400 naming the field.
func TestHarmonyEffortPrompt(t *testing.T) {
	e := gptOSSEnv(t)
	for _, tc := range []struct {
		name, effort, want string
	}{
		{"absent", "", "Reasoning: medium\n"},
		{"high", "high", "Reasoning: high\n"},
		{"low", "low", "Reasoning: low\n"},
		{"none is low", "none", "Reasoning: low\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &ChatRequest{Messages: json.RawMessage(`[{"role": "user", "content": "Hi"}]`)}
			if tc.effort != "" {
				req.ReasoningEffort = &tc.effort
			}
			{
				_, toks, err := e.srv.ChatParams(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if prompt := e.model.Vocab.Decode(toks); !strings.Contains(prompt, tc.want) {
					t.Errorf("prompt %q, want %q in it", prompt, tc.want)
				}
				if !req.Reasoning.Split {
					t.Errorf("effort %q: the reply is not split", tc.effort)
				}
			}
		})
	}
	var bad struct {
		Error struct{ Param string } `json:"error"`
	}
	e.PostJSON("/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "Hi"}},
		"reasoning_effort": "extreme"}, http.StatusBadRequest, &bad)
	if bad.Error.Param != "reasoning_effort" {
		t.Errorf("a bad effort names %q, want reasoning_effort", bad.Error.Param)
	}
}
