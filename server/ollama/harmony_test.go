package ollama

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"ubatch/chat"
	"ubatch/internal/testdata"
	"ubatch/server"
	"ubatch/server/servertest"
)

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestOllamaHarmony: Ollama's /api/chat reads a harmony reply into message.thinking, content
// and tool_calls, whole and streamed (the reply is given to the route's reader, as no Ollama
// field can hold the model to harmony); think levels are gpt-oss's efforts, and think false is
// not a 400.
func TestOllamaHarmony(t *testing.T) {
	e := newEnv(t, servertest.Options{NCtx: 2048, Config: server.Config{ChatTemplate: string(testdata.ReadFile(t, "templates/openai-gpt-oss-120b.jinja"))}})
	a := &api{Server: e.Server}
	format, kwargs, err := a.ollamaThink(json.RawMessage(`"high"`))
	if err != nil || deref(format) != server.ReasoningAuto || kwargs["reasoning_effort"] != "high" {
		t.Fatalf("think high: %v %v %v", deref(format), kwargs, err)
	}
	if format, kwargs, err = a.ollamaThink(json.RawMessage(`false`)); err != nil || deref(format) != server.ReasoningAuto || kwargs["reasoning_effort"] != "low" {
		t.Fatalf("think false: %v %v %v, want the split kept at effort low", deref(format), kwargs, err)
	}
	call := "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}"
	for _, tc := range []struct {
		name, text, thinking, content, call string
	}{
		{"answer", "<|channel|>analysis<|message|>hmm<|end|><|start|>assistant<|channel|>final<|message|>Hi!", "hmm", "Hi!", ""},
		{"call", "<|channel|>analysis<|message|>need it<|end|>" + call, "need it", "", `{"city":"Oslo"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &ollamaReply{s: a, chat: true}
			o.setup(server.GenParams{Tools: &server.ToolMode{Format: chat.ToolHarmony, Names: []string{"get_weather"}}}, server.ReasoningMode{Split: true})
			r := &server.ChoiceResult{Finish: "stop"}
			r.Text.WriteString(tc.text)
			resp := o.Whole([]*server.ChoiceResult{r}, server.UsageJSON{}).(ollamaResponse)
			m := resp.Message
			if m.Thinking != tc.thinking || m.Content != tc.content {
				t.Errorf("thinking %q content %q, want %q %q", m.Thinking, m.Content, tc.thinking, tc.content)
			}
			if got := len(m.ToolCalls); tc.call == "" && got != 0 || tc.call != "" && (got != 1 || string(m.ToolCalls[0].Function.Arguments) != tc.call) {
				t.Errorf("tool calls %+v, want %q", m.ToolCalls, tc.call)
			}

			// Streamed in 3-byte pieces, one object a line: the same thinking, content and call.
			o = &ollamaReply{s: a, chat: true}
			o.setup(server.GenParams{Stream: true, Tools: &server.ToolMode{Format: chat.ToolHarmony, Names: []string{"get_weather"}}}, server.ReasoningMode{Split: true})
			rec := httptest.NewRecorder()
			sse := o.Open(rec)
			rec.Body.Reset()
			for i := 0; i < len(tc.text); i += 3 {
				ev := server.SeqEvent{Text: tc.text[i:min(len(tc.text), i+3)]}
				if ev.Done = i+3 >= len(tc.text); ev.Done {
					ev.Finish = "stop"
				}
				if err := o.Chunk(sse, ev); err != nil {
					t.Fatal(err)
				}
			}
			var thinking, content strings.Builder
			var calls []ollamaToolCall
			for _, line := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n") {
				var obj struct{ Message *ollamaMessage }
				if err := json.Unmarshal([]byte(line), &obj); err != nil || obj.Message == nil {
					t.Fatalf("line %q: %v", line, err)
				}
				if strings.Contains(obj.Message.Thinking+obj.Message.Content, "<|") {
					t.Fatalf("line %q carries markup", line)
				}
				thinking.WriteString(obj.Message.Thinking)
				content.WriteString(obj.Message.Content)
				calls = append(calls, obj.Message.ToolCalls...)
			}
			if thinking.String() != tc.thinking || content.String() != tc.content || len(calls) != len(m.ToolCalls) ||
				len(calls) == 1 && string(calls[0].Function.Arguments) != tc.call {
				t.Errorf("streamed: thinking %q content %q calls %+v, want %q %q %q", thinking.String(), content.String(), calls, tc.thinking, tc.content, tc.call)
			}
		})
	}
}
