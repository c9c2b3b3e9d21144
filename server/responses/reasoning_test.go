package responses

import (
	"encoding/json"
	"strings"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/server"
	"ubatch/server/servertest"
)

// thinkGrammar makes a model write a thought, then an answer, as a Qwen3 model does.
const thinkGrammar = `root ::= "<think>" [a-z] [a-z ]{2,24} "</think>" [a-z] [a-z ]{2,24}`

// TestResponsesReasoning: with a Qwen3 template, /v1/responses puts the thought in a reasoning
// item (one reasoning_text part) before the message, streamed as response.reasoning_text.delta
// events that join into the item's text, all before the message's first event and at output
// index 0, the message at 1; the same items as without streaming.
func TestResponsesReasoning(t *testing.T) {
	e := newEnv(t, servertest.Options{Config: server.Config{ChatTemplate: string(testdata.ReadFile(t, "templates/Qwen-Qwen3-0.6B.jinja"))}})
	body := map[string]any{"input": "Think, then tell me a story.", "max_output_tokens": 80, "temperature": 0, "grammar": thinkGrammar}
	whole := respond(e, body)
	if len(whole.Output) != 2 || whole.Output[0].Type != "reasoning" || len(whole.Output[0].Content) != 1 ||
		whole.Output[0].Content[0].Type != "reasoning_text" || whole.Output[1].Type != "message" {
		t.Fatalf("output %+v, want a reasoning item then a message", whole.Output)
	}
	thought, answer := whole.Output[0].Content[0].Text, whole.text()
	if thought == "" || strings.Contains(thought, "<think>") || answer == "" || strings.Contains(answer, "think>") {
		t.Fatalf("thought %q, answer %q: want the markup gone and both non-empty", thought, answer)
	}
	events := streamResponse(e, body)
	var deltas strings.Builder
	reasoningDone, messageAdded := -1, -1
	for i, ev := range events {
		switch ev.name {
		case "response.reasoning_text.delta":
			if messageAdded >= 0 || ev.data["output_index"] != 0.0 || ev.data["content_index"] != 0.0 {
				t.Fatalf("reasoning delta %d %v after the message or off index 0", i, ev.data)
			}
			deltas.WriteString(ev.data["delta"].(string))
		case "response.reasoning_text.done":
			reasoningDone = i
			if ev.data["text"] != thought {
				t.Errorf("reasoning_text.done %q, want %q", ev.data["text"], thought)
			}
		case "response.output_item.added":
			if item := ev.data["item"].(map[string]any); item["type"] == "message" {
				messageAdded = i
				if ev.data["output_index"] != 1.0 {
					t.Errorf("the message is added at output index %v, want 1", ev.data["output_index"])
				}
			}
		case "response.output_text.delta":
			if ev.data["output_index"] != 1.0 {
				t.Errorf("text delta at output index %v, want 1", ev.data["output_index"])
			}
		}
	}
	if deltas.String() != thought || reasoningDone < 0 || messageAdded < reasoningDone {
		t.Fatalf("reasoning deltas %q (want %q), done at event %d, message added at %d", deltas.String(), thought, reasoningDone, messageAdded)
	}
	var last responseResult
	raw, _ := json.Marshal(events[len(events)-1].data["response"])
	json.Unmarshal(raw, &last)
	if len(last.Output) != 2 || last.Output[0].Content[0].Text != thought || last.text() != answer {
		t.Errorf("final streamed response %+v, want the thought %q and the answer %q", last.Output, thought, answer)
	}
}

// TestResponsesReasoningEffort: reasoning.effort is the template's thinking switch: low to high
// think (the thought split out, the effort echoed), none and minimal do not (enable_thinking
// false: the template closes the thought in the prompt, and the reply is left as written).
func TestResponsesReasoningEffort(t *testing.T) {
	e := newEnv(t, servertest.Options{Config: server.Config{ChatTemplate: string(testdata.ReadFile(t, "templates/Qwen-Qwen3-0.6B.jinja"))}})
	tests := []struct {
		name, effort string
		split        bool
	}{
		{name: "high thinks", effort: "high", split: true},
		{name: "low thinks", effort: "low", split: true},
		{name: "minimal does not", effort: "minimal"},
		{name: "none does not", effort: "none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r struct {
				responseResult
				Reasoning struct{ Effort *string } `json:"reasoning"`
			}
			e.PostJSON("/v1/responses", map[string]any{"input": "Think, then tell me a story.", "max_output_tokens": 80,
				"temperature": 0, "grammar": thinkGrammar, "reasoning": map[string]any{"effort": tc.effort}}, 200, &r)
			split := len(r.Output) == 2 && r.Output[0].Type == "reasoning"
			if split != tc.split || split == strings.Contains(r.text(), "<think>") {
				t.Errorf("output %+v: split %v, want %v", r.Output, split, tc.split)
			}
			if r.Reasoning.Effort == nil || *r.Reasoning.Effort != tc.effort {
				t.Errorf("reasoning.effort reported %v, want %q", r.Reasoning.Effort, tc.effort)
			}
		})
	}
}
