package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"ubatch/internal/testdata"
)

// streamedChat is a streamed chat reply put together as a client does.
type streamedChat struct {
	reasoning, content strings.Builder
	reasoningChunks    int
	contentBefore      bool // content arrived before the last reasoning delta
	calls              []ToolCallJSON
	callChunks         int // chunks carrying tool_calls
	finish             string
}

// streamChat posts body with stream: true and reads the reply of choice 0, failing on a
// tool-call delta out of shape: a call opens with its id, type and name and empty arguments;
// later deltas carry only its index and a fragment of the arguments.
func (e *testEnv) streamChat(body map[string]any) *streamedChat {
	e.T.Helper()
	resp := e.PostStream("/v1/chat/completions", body)
	defer resp.Body.Close()
	out := &streamedChat{}
	for _, ev := range sseEvents(e.T, resp.Body) {
		if ev == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta        chatDelta `json:"delta"`
				FinishReason *string   `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &chunk); err != nil {
			e.T.Fatalf("bad chunk %q: %v", ev, err)
		}
		if len(chunk.Choices) == 0 {
			continue
		}
		d := chunk.Choices[0].Delta
		if d.ReasoningContent != nil {
			out.reasoning.WriteString(*d.ReasoningContent)
			out.reasoningChunks++
			if out.content.Len() > 0 {
				out.contentBefore = true
			}
		}
		if d.Content != nil {
			out.content.WriteString(*d.Content)
		}
		if len(d.ToolCalls) > 0 {
			out.callChunks++
		}
		for _, tc := range d.ToolCalls {
			index := -1 // a delta without an index matches no call
			if tc.Index != nil {
				index = *tc.Index
			}
			switch {
			case tc.ID != "":
				if index != len(out.calls) || tc.Type != "function" || tc.Function.Name == "" || tc.Function.Arguments != "" {
					e.T.Fatalf("call start %+v after %d calls", tc, len(out.calls))
				}
				var c ToolCallJSON
				c.ID, c.Type, c.Function.Name = tc.ID, tc.Type, tc.Function.Name
				out.calls = append(out.calls, c)
			case index < 0 || index != len(out.calls)-1 || tc.Type != "" || tc.Function.Name != "":
				e.T.Fatalf("arguments delta %+v with %d calls open", tc, len(out.calls))
			default:
				out.calls[index].Function.Arguments += tc.Function.Arguments
			}
		}
		if f := chunk.Choices[0].FinishReason; f != nil {
			out.finish = *f
		}
	}
	return out
}

// chatWhole is a non-streamed chat reply's first choice.
type chatWhole struct {
	Message struct {
		Content          *string        `json:"content"`
		ReasoningContent *string        `json:"reasoning_content"`
		ToolCalls        []ToolCallJSON `json:"tool_calls"`
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
}

func (e *testEnv) chatWhole(body map[string]any) chatWhole {
	e.T.Helper()
	var resp struct {
		Choices []chatWhole `json:"choices"`
	}
	e.PostJSON("/v1/chat/completions", body, http.StatusOK, &resp)
	if len(resp.Choices) != 1 {
		e.T.Fatalf("choices %+v", resp.Choices)
	}
	return resp.Choices[0]
}

// TestChatReasoning: a Qwen3-template model forced by a grammar to think, then answer, gets its
// thought in reasoning_content and its answer in content, streamed (the thought as deltas
// before the answer) and not; reasoning_format none, or serve's --reasoning-format none, leave
// both in content.
func TestChatReasoning(t *testing.T) {
	qwen3 := string(testdata.ReadFile(t, "templates/Qwen-Qwen3-0.6B.jinja"))
	body := func(format string) map[string]any {
		b := map[string]any{
			"messages":    []map[string]string{{"role": "user", "content": "Think, then tell me a story."}},
			"max_tokens":  80,
			"temperature": 0,
			"grammar":     `root ::= "<think>" [a-z] [a-z ]{2,24} "</think>" [a-z] [a-z ]{2,24}`,
		}
		if format != "" {
			b["reasoning_format"] = format
		}
		return b
	}
	auto := newEnv(t, envOptions{chatTemplate: qwen3})
	raw := deref(auto.chatWhole(body("none")).Message.Content)
	thought, answer, ok := strings.Cut(strings.TrimPrefix(raw, "<think>"), "</think>")
	thought, answer = strings.TrimSpace(thought), strings.TrimLeft(answer, " ")
	if !ok || !strings.HasPrefix(raw, "<think>") || thought == "" || answer == "" {
		t.Fatalf("reasoning_format none: content %q, want the grammar's <think>...</think>...", raw)
	}
	serverNone := newEnv(t, envOptions{chatTemplate: qwen3, reasoningFormat: ReasoningNone})
	for _, tc := range []struct {
		name               string
		env                *testEnv
		format             string
		reasoning, content string
	}{
		{"default is auto", auto, "", thought, answer},
		{"auto", auto, "auto", thought, answer},
		{"deepseek", auto, "deepseek", thought, answer},
		{"none", auto, "none", "", raw},
		{"server default none", serverNone, "", "", raw},
		{"request overrides the server", serverNone, "auto", thought, answer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.env.chatWhole(body(tc.format))
			if got := deref(w.Message.ReasoningContent); got != tc.reasoning || deref(w.Message.Content) != tc.content {
				t.Errorf("whole: reasoning_content %q content %q, want %q %q", got, deref(w.Message.Content), tc.reasoning, tc.content)
			}
			if tc.reasoning == "" && w.Message.ReasoningContent != nil {
				t.Errorf("whole: reasoning_content present (%q), want it omitted", *w.Message.ReasoningContent)
			}
			s := tc.env.streamChat(body(tc.format))
			if s.reasoning.String() != tc.reasoning || s.content.String() != tc.content || s.finish != "stop" {
				t.Errorf("streamed: reasoning %q content %q finish %q, want %q %q stop", s.reasoning.String(), s.content.String(), s.finish, tc.reasoning, tc.content)
			}
			if tc.reasoning != "" && (s.reasoningChunks < 2 || s.contentBefore) {
				t.Errorf("streamed: the thought came in %d chunks (content before it: %v), want deltas as it is written, before the answer", s.reasoningChunks, s.contentBefore)
			}
		})
	}
}

// TestChatReasoningTemplates: the prompt side. The Qwen3 template is given enable_thinking
// through chat_template_kwargs and an assistant turn's reasoning_content back; a template that
// opens the thought in the prompt (DeepSeek-R1's distills, with enable_thinking) makes the whole
// reply, which never closes it here, reasoning, but for reasoning_format none; a bad
// reasoning_format is a 400.
func TestChatReasoningTemplates(t *testing.T) {
	qwen3 := newEnv(t, envOptions{chatTemplate: string(testdata.ReadFile(t, "templates/Qwen-Qwen3-0.6B.jinja"))})
	history := []map[string]any{
		{"role": "user", "content": "Weather?"},
		{"role": "assistant", "content": "", "reasoning_content": "I should call the tool.",
			"tool_calls": []map[string]any{{"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Oslo"}`}}}},
		{"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
	}
	for _, tc := range []struct {
		name   string
		body   map[string]any
		want   string
		suffix bool
	}{
		{"reasoning_content rendered", map[string]any{"messages": history}, "<|im_start|>assistant\n<think>\nI should call the tool.\n</think>\n\n<tool_call>", false},
		{"enable_thinking false", map[string]any{"messages": history[:1], "chat_template_kwargs": map[string]any{"enable_thinking": false}}, "<|im_start|>assistant\n<think>\n\n</think>\n\n", true},
		{"enable_thinking absent", map[string]any{"messages": history[:1]}, "<|im_start|>assistant\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out struct {
				Prompt string `json:"prompt"`
			}
			qwen3.PostJSON("/apply-template", tc.body, http.StatusOK, &out)
			if tc.suffix && !strings.HasSuffix(out.Prompt, tc.want) || !tc.suffix && !strings.Contains(out.Prompt, tc.want) {
				t.Errorf("prompt %q, want it to hold %q (at its end: %v)", out.Prompt, tc.want, tc.suffix)
			}
		})
	}

	r1 := newEnv(t, envOptions{chatTemplate: string(testdata.ReadFile(t, "templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"))})
	ask := func(format string) map[string]any {
		// This template closes the thought it opens unless enable_thinking is true.
		return map[string]any{"messages": []map[string]string{{"role": "user", "content": "Once upon a time"}},
			"max_tokens": 12, "temperature": 0, "reasoning_format": format,
			"chat_template_kwargs": map[string]any{"enable_thinking": true}}
	}
	raw := deref(r1.chatWhole(ask("none")).Message.Content)
	if strings.Contains(raw, "</think>") || strings.TrimSpace(raw) == "" {
		t.Fatalf("the story model wrote %q: the test needs a reply that does not close the thought", raw)
	}
	for _, format := range []string{"auto", "deepseek"} {
		w := r1.chatWhole(ask(format))
		if deref(w.Message.ReasoningContent) != strings.TrimSpace(raw) || deref(w.Message.Content) != "" {
			t.Errorf("%s: reasoning_content %q content %q, want the whole reply %q as reasoning", format, deref(w.Message.ReasoningContent), deref(w.Message.Content), raw)
		}
		s := r1.streamChat(ask(format))
		if s.reasoning.String() != strings.TrimSpace(raw) || s.content.String() != "" {
			t.Errorf("%s streamed: reasoning %q content %q, want %q as reasoning", format, s.reasoning.String(), s.content.String(), raw)
		}
	}

	resp := r1.Post(context.Background(), "/v1/chat/completions", ask("deepseek-legacy"))
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), `"param":"reasoning_format"`) {
		t.Errorf("reasoning_format deepseek-legacy: status %d %s, want a 400 naming reasoning_format", resp.StatusCode, data)
	}
}
