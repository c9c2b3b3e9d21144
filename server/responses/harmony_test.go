package responses

import (
	"encoding/json"
	"strings"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/server"
	"ubatch/server/servertest"
)

// harmonyGrammar makes a model write harmony as gpt-oss does: a thought on the analysis
// channel, then the answer on the final one (stories260K spells the markers in characters;
// gpt-oss's vocabulary prints its special tokens as the same text).
const harmonyGrammar = `root ::= "<|channel|>analysis<|message|>" [a-z] [a-z ]{2,24} "<|end|><|start|>assistant<|channel|>final<|message|>" [a-z] [a-z ]{2,24}`

func gptOSSEnv(t *testing.T) *servertest.Env {
	return newEnv(t, servertest.Options{NCtx: 2048, Config: server.Config{ChatTemplate: string(testdata.ReadFile(t, "templates/openai-gpt-oss-120b.jinja"))}})
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
			whole := respond(e, body)
			if len(whole.Output) != 2 || whole.Output[0].Type != "reasoning" || whole.Output[1].Type != "message" {
				t.Fatalf("output %+v, want a reasoning item then a message", whole.Output)
			}
			thought, answer := whole.Output[0].Content[0].Text, whole.text()
			if thought == "" || answer == "" || strings.Contains(thought+answer, "<|") {
				t.Fatalf("thought %q, answer %q: want both, without markup", thought, answer)
			}
			var streamed strings.Builder
			for _, ev := range streamResponse(e, body) {
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
	r := respond(e, body)
	if len(r.Output) != 2 || r.Output[0].Type != "reasoning" || r.Output[1].Type != "function_call" || r.Output[1].Name != "get_weather" {
		t.Fatalf("output %+v, want a reasoning item and a get_weather call", r.Output)
	}
	var args struct{ City string }
	if err := json.Unmarshal([]byte(r.Output[1].Arguments), &args); err != nil || args.City == "" {
		t.Fatalf("arguments %q: %v", r.Output[1].Arguments, err)
	}
	var joined, thought strings.Builder
	for _, ev := range streamResponse(e, body) {
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
	if got := respond(e, follow); got.Status != "completed" && got.Status != "incomplete" {
		t.Fatalf("follow-up %+v", got)
	}
}
