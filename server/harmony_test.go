package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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

// TestResponsesHarmony: /v1/responses gives a harmony reply's thought as a reasoning item
// before the message, streamed and not, whatever reasoning.effort says (none too: gpt-oss
// cannot stop reasoning; TestHarmonyEffortPrompt checks the prompt).
func TestResponsesHarmony(t *testing.T) {
	e := gptOSSEnv(t)
	for _, effort := range []string{"", "high", "none"} {
		t.Run("effort "+effort, func(t *testing.T) {
			body := map[string]any{"input": "Think, then tell me a story.", "max_output_tokens": 400, "temperature": 0, "grammar": harmonyGrammar}
			if effort != "" {
				body["reasoning"] = map[string]any{"effort": effort}
			}
			whole := e.respond(body)
			if len(whole.Output) != 2 || whole.Output[0].Type != "reasoning" || whole.Output[1].Type != "message" {
				t.Fatalf("output %+v, want a reasoning item then a message", whole.Output)
			}
			thought, answer := whole.Output[0].Content[0].Text, whole.text()
			if thought == "" || answer == "" || strings.Contains(thought+answer, "<|") {
				t.Fatalf("thought %q, answer %q: want both, without markup", thought, answer)
			}
			var streamed strings.Builder
			for _, ev := range e.streamResponse(body) {
				if ev.name == "response.reasoning_text.delta" {
					streamed.WriteString(ev.data["delta"].(string))
				}
			}
			if streamed.String() != thought {
				t.Errorf("streamed thought %q, want %q", streamed.String(), thought)
			}
		})
	}
}

// TestResponsesHarmonyCall: a harmony call is a function_call item after the reasoning item,
// streamed and not, and the follow-up turn with the call's output renders (gpt-oss's template
// raises on a tool result that no assistant call precedes: a 400).
func TestResponsesHarmonyCall(t *testing.T) {
	e := gptOSSEnv(t)
	body := map[string]any{"input": "Weather in Paris?", "tools": []any{weatherFlat}, "max_output_tokens": 400, "temperature": 0,
		"grammar": `root ::= "<|channel|>analysis<|message|>" [a-z] [a-z ]{2,20} "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"" [a-z]{1,8} "\"}"`}
	r := e.respond(body)
	if len(r.Output) != 2 || r.Output[0].Type != "reasoning" || r.Output[1].Type != "function_call" || r.Output[1].Name != "get_weather" {
		t.Fatalf("output %+v, want a reasoning item and a get_weather call", r.Output)
	}
	var args struct{ City string }
	if err := json.Unmarshal([]byte(r.Output[1].Arguments), &args); err != nil || args.City == "" {
		t.Fatalf("arguments %q: %v", r.Output[1].Arguments, err)
	}
	var joined, thought strings.Builder
	for _, ev := range e.streamResponse(body) {
		switch ev.name {
		case "response.function_call_arguments.delta":
			joined.WriteString(ev.data["delta"].(string))
		case "response.reasoning_text.delta":
			thought.WriteString(ev.data["delta"].(string))
		}
	}
	if joined.String() != r.Output[1].Arguments || thought.String() != r.Output[0].Content[0].Text {
		t.Errorf("streamed arguments %q thought %q, want %q %q", joined.String(), thought.String(), r.Output[1].Arguments, r.Output[0].Content[0].Text)
	}
	follow := map[string]any{"tools": []any{weatherFlat}, "max_output_tokens": 4, "temperature": 0, "previous_response_id": r.ID,
		"input": []any{map[string]any{"type": "function_call_output", "call_id": r.Output[1].CallID, "output": "22C"}}}
	if got := e.respond(follow); got.Status != "completed" && got.Status != "incomplete" {
		t.Fatalf("follow-up %+v", got)
	}
}

// TestHarmonyEffortPrompt: chat's reasoning_effort and Responses' reasoning.effort (as the
// route maps it onto the chat request) become the system message's Reasoning line (none, which
// gpt-oss cannot do, the least: low), the reply split; a bad effort is a 400 naming the field.
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
			chatReq := &chatRequest{Messages: json.RawMessage(`[{"role": "user", "content": "Hi"}]`)}
			responsesReq := &chatRequest{Messages: chatReq.Messages}
			if tc.effort != "" {
				chatReq.ReasoningEffort = &tc.effort
				if err := e.srv.reasoningEffort(json.RawMessage(`{"effort": "`+tc.effort+`"}`), responsesReq); err != nil {
					t.Fatal(err)
				}
			}
			for _, req := range []*chatRequest{chatReq, responsesReq} {
				_, toks, err := e.srv.chatParams(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if prompt := e.model.Vocab.Decode(toks); !strings.Contains(prompt, tc.want) {
					t.Errorf("prompt %q, want %q in it", prompt, tc.want)
				}
				if !req.reasoning.split {
					t.Errorf("effort %q: the reply is not split", tc.effort)
				}
			}
		})
	}
	var bad struct {
		Error struct{ Param string } `json:"error"`
	}
	e.postJSON("/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "Hi"}},
		"reasoning_effort": "extreme"}, http.StatusBadRequest, &bad)
	if bad.Error.Param != "reasoning_effort" {
		t.Errorf("a bad effort names %q, want reasoning_effort", bad.Error.Param)
	}
}

// TestOllamaHarmony: Ollama's /api/chat reads a harmony reply into message.thinking, content
// and tool_calls, whole and streamed (the reply is given to the route's reader, as no Ollama
// field can hold the model to harmony); think levels are gpt-oss's efforts, and think false is
// not a 400.
func TestOllamaHarmony(t *testing.T) {
	e := gptOSSEnv(t)
	format, kwargs, err := e.srv.ollamaThink(json.RawMessage(`"high"`))
	if err != nil || deref(format) != ReasoningAuto || kwargs["reasoning_effort"] != "high" {
		t.Fatalf("think high: %v %v %v", deref(format), kwargs, err)
	}
	if format, kwargs, err = e.srv.ollamaThink(json.RawMessage(`false`)); err != nil || deref(format) != ReasoningAuto || kwargs["reasoning_effort"] != "low" {
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
			o := &ollamaReply{s: e.srv, chat: true}
			o.setup(genParams{tools: &toolMode{format: chat.ToolHarmony, names: []string{"get_weather"}}}, reasoningMode{split: true})
			r := &choiceResult{finish: "stop"}
			r.text.WriteString(tc.text)
			resp := o.whole([]*choiceResult{r}, usageJSON{}).(ollamaResponse)
			m := resp.Message
			if m.Thinking != tc.thinking || m.Content != tc.content {
				t.Errorf("thinking %q content %q, want %q %q", m.Thinking, m.Content, tc.thinking, tc.content)
			}
			if got := len(m.ToolCalls); tc.call == "" && got != 0 || tc.call != "" && (got != 1 || string(m.ToolCalls[0].Function.Arguments) != tc.call) {
				t.Errorf("tool calls %+v, want %q", m.ToolCalls, tc.call)
			}

			// Streamed in 3-byte pieces, one object a line: the same thinking, content and call.
			o = &ollamaReply{s: e.srv, chat: true}
			o.setup(genParams{stream: true, tools: &toolMode{format: chat.ToolHarmony, names: []string{"get_weather"}}}, reasoningMode{split: true})
			rec := httptest.NewRecorder()
			sse := &sseWriter{w: rec, rc: http.NewResponseController(rec), ndjson: true}
			for i := 0; i < len(tc.text); i += 3 {
				ev := seqEvent{text: tc.text[i:min(len(tc.text), i+3)]}
				if ev.done = i+3 >= len(tc.text); ev.done {
					ev.finish = "stop"
				}
				if err := o.chunk(sse, ev); err != nil {
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
