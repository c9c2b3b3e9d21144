package chat

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"ubatch/internal/testdata"
)

func TestParseToolCalls(t *testing.T) {
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			content, calls := ParseToolCalls(tc.f, tc.text)
			if content != tc.content || !slices.Equal(calls, tc.calls) {
				t.Fatalf("whole: content %q calls %v, want %q %v", content, calls, tc.content, tc.calls)
			}
			// Streamed in pieces of every size, the result is the same and no marker leaks.
			for size := 1; size <= 7; size++ {
				p := NewToolParser(tc.f)
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
