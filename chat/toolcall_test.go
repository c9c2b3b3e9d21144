package chat

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"ubatch/internal/testdata"
)

func TestParseToolCalls(t *testing.T) {
	names := []string{"get_weather", "get_time"}
	weather := ToolCall{Name: "get_weather", Arguments: `{"city":"Paris"}`}
	time := ToolCall{Name: "get_time", Arguments: `{"tz":"CET"}`}
	for _, tc := range []struct {
		name    string
		f       ToolFormat
		text    string
		content string
		calls   []ToolCall
	}{
		{"hermes one", ToolHermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "", []ToolCall{weather}},
		{"hermes text then two", ToolHermes, "Let me check.\n<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}</tool_call>\n<tool_call>{\"name\":\"get_time\",\"arguments\":{\"tz\":\"CET\"}}</tool_call>", "Let me check.\n", []ToolCall{weather, time}},
		{"hermes unclosed at eot", ToolHermes, "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}", "", []ToolCall{weather}},
		{"hermes string arguments", ToolHermes, "<tool_call>{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}</tool_call>", "", []ToolCall{weather}},
		{"hermes plain text", ToolHermes, "The weather is <b>fine</b>.", "The weather is <b>fine</b>.", nil},
		{"hermes broken json is content", ToolHermes, "<tool_call>{not json}</tool_call>", "<tool_call>{not json}</tool_call>", nil},
		{"hermes marker prefix at end", ToolHermes, "a <tool_", "a <tool_", nil},
		{"llama3 json", ToolLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", []ToolCall{weather}},
		{"llama3 python tag, two", ToolLlama3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}}", "", []ToolCall{weather, time}},
		{"llama3 text", ToolLlama3, "It is sunny {mostly}.", "It is sunny {mostly}.", nil},
		{"llama3 json that is not a call", ToolLlama3, "{\"answer\": 42}", "{\"answer\": 42}", nil},
		{"mistral list", ToolMistral, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]", "", []ToolCall{weather, time}},
		{"mistral args form", ToolMistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{\"tz\":\"CET\"}", "", []ToolCall{weather, time}},
		{"mistral text", ToolMistral, "No tools needed.", "No tools needed.", nil},
		// Only the offered functions are calls: anything else is the model's text.
		{"hermes unknown function is content", ToolHermes, "<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>", "<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>", nil},
		{"hermes known then unknown is content", ToolHermes, "<tool_call>{\"name\":\"get_time\",\"arguments\":{\"tz\":\"CET\"}}</tool_call><tool_call>{\"name\":\"Get_time\",\"arguments\":{}}</tool_call>", "<tool_call>{\"name\":\"get_time\",\"arguments\":{\"tz\":\"CET\"}}</tool_call><tool_call>{\"name\":\"Get_time\",\"arguments\":{}}</tool_call>", nil},
		{"llama3 unknown function is content", ToolLlama3, "{\"name\": \"exec\", \"parameters\": {}}", "{\"name\": \"exec\", \"parameters\": {}}", nil},
		{"mistral list with unknown is content", ToolMistral, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"exec\", \"arguments\": {}}]", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"exec\", \"arguments\": {}}]", nil},
		{"mistral args form unknown is content", ToolMistral, "[TOOL_CALLS]exec[ARGS]{}", "[TOOL_CALLS]exec[ARGS]{}", nil},
		// The closing tag inside an argument string does not end the call.
		{"hermes closing tag inside arguments", ToolHermes, "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"</tool_call>\"}}</tool_call>", "", []ToolCall{{Name: "get_weather", Arguments: `{"city":"</tool_call>"}`}}},
		{"hermes text after the call is not a call", ToolHermes, "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}} trailing</tool_call>", "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}} trailing</tool_call>", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content, calls := ParseToolCalls(tc.f, tc.text, names)
			if content != tc.content || !slices.Equal(calls, tc.calls) {
				t.Fatalf("whole: content %q calls %v, want %q %v", content, calls, tc.content, tc.calls)
			}
			// Streamed in pieces of every size, the result is the same and no marker leaks.
			for size := 1; size <= 7; size++ {
				p := NewToolParser(tc.f, names)
				var got string
				for i := 0; i < len(tc.text); i += size {
					got += p.Add(tc.text[i:min(len(tc.text), i+size)])
				}
				rest, calls := p.Finish()
				if got+rest != tc.content || !slices.Equal(calls, tc.calls) {
					t.Fatalf("pieces of %d: content %q calls %v, want %q %v", size, got+rest, calls, tc.content, tc.calls)
				}
			}
		})
	}
}

// TestToolParserWithoutNames: a parser offered no functions returns every reply as content.
func TestToolParserWithoutNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    ToolFormat
		text string
	}{
		{"hermes", ToolHermes, "<tool_call>{\"name\":\"get_weather\",\"arguments\":{}}</tool_call>"},
		{"llama3", ToolLlama3, "{\"name\": \"get_weather\", \"parameters\": {}}"},
		{"mistral", ToolMistral, "[TOOL_CALLS]get_weather[ARGS]{}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if content, calls := ParseToolCalls(tc.f, tc.text, nil); content != tc.text || calls != nil {
				t.Errorf("content %q calls %v, want the text as content", content, calls)
			}
		})
	}
}

// TestDetectToolFormat reads the shared templates of the families the server runs.
func TestDetectToolFormat(t *testing.T) {
	for _, tc := range []struct {
		file string
		want ToolFormat
	}{
		{"Qwen-Qwen2.5-7B-Instruct.jinja", ToolHermes},
		{"Qwen-Qwen3-0.6B.jinja", ToolHermes},
		{"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolHermes},
		{"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolLlama3},
		{"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolLlama3},
		{"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolMistral},
		{"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolMistral},
	} {
		t.Run(tc.file, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(testdata.Path(t, "templates"), tc.file))
			if err != nil {
				t.Skipf("shared template: %v", err)
			}
			if got := DetectToolFormat(string(src)); got != tc.want {
				t.Errorf("%s: %v, want %v", tc.file, got, tc.want)
			}
		})
	}
}
