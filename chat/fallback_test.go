package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"ubatch/internal/testdata"
)

var fallbackWeather = json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}`)

// fallbackToolsHeader is the system turn the fallback writes for tools, up to the tools list.
const fallbackToolsHeader = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"

const fallbackToolsFooter = "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"

// TestFallbackTools: the fallback shows the tools in a system turn, the assistant's calls and the
// tools' results, as Qwen's templates do.
func TestFallbackTools(t *testing.T) {
	call := json.RawMessage(`[{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]`)
	tests := []struct {
		name  string
		msgs  []map[string]any
		tools []any
		want  string
	}{
		{name: "tools without a system message",
			msgs:  []map[string]any{{"role": "user", "content": "Weather?"}},
			tools: []any{fallbackWeather},
			want: "<|im_start|>system\n" + fallbackToolsHeader + string(fallbackWeather) + fallbackToolsFooter +
				"<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n"},
		{name: "system message joins the tools turn",
			msgs:  []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}},
			tools: []any{fallbackWeather, json.RawMessage(`{"type": "function", "function": {"name": "get_time"}}`)},
			want: "<|im_start|>system\nBe brief.\n\n" + fallbackToolsHeader + string(fallbackWeather) +
				"\n{\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}" + fallbackToolsFooter +
				"<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n"},
		{name: "system parts join the tools turn",
			msgs:  []map[string]any{{"role": "system", "content": json.RawMessage(`[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]`)}},
			tools: []any{fallbackWeather},
			want:  "<|im_start|>system\na\nb\n\n" + fallbackToolsHeader + string(fallbackWeather) + fallbackToolsFooter + "<|im_start|>assistant\n"},
		{name: "call and results, no tools",
			msgs: []map[string]any{
				{"role": "user", "content": "Weather?"},
				{"role": "assistant", "content": nil, "tool_calls": call},
				{"role": "tool", "tool_call_id": "call_1", "content": "22C"},
				{"role": "tool", "tool_call_id": "call_2", "content": "rain"},
			},
			want: "<|im_start|>user\nWeather?<|im_end|>\n" +
				"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\n22C\n</tool_response>\n<tool_response>\nrain\n</tool_response><|im_end|>\n" +
				"<|im_start|>assistant\n"},
		{name: "content then two calls, arguments as text",
			msgs: []map[string]any{
				{"role": "assistant", "content": "Checking.", "tool_calls": json.RawMessage(`[
					{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
					{"type": "function", "function": {"name": "get_time", "arguments": {}}}]`)},
				{"role": "tool", "content": "ok"},
				{"role": "user", "content": "Thanks"},
			},
			want: "<|im_start|>assistant\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>" +
				"\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call><|im_end|>\n" +
				"<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n" +
				"<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n"},
		{name: "a name that is not plain stays inside its JSON string",
			msgs: []map[string]any{{"role": "assistant", "content": nil, "tool_calls": json.RawMessage(`[{"function": {"name": "a\"b", "arguments": {}}}]`)}},
			want: "<|im_start|>assistant\n<tool_call>\n{\"name\": \"a\\\"b\", \"arguments\": {}}\n</tool_call><|im_end|>\n<|im_start|>assistant\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Fallback().Render(tt.msgs, Options{AddGenerationPrompt: true, Tools: tt.tools})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
	if f := DetectToolFormat(Fallback().Source()); f != ToolHermes {
		t.Errorf("the fallback teaches %v; the server would parse its calls as another format than Hermes", f)
	}
}

// TestFallbackMatchesQwen3: for a conversation with tools, a call and its results, the fallback
// writes what Qwen3's own template writes.
func TestFallbackMatchesQwen3(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(testdata.Path(t, "templates"), "Qwen-Qwen3-0.6B.jinja"))
	if err != nil {
		t.Skipf("shared template: %v", err)
	}
	qwen := mustParse(t, string(src))
	call := json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]`)
	for _, tc := range []struct {
		name string
		msgs []map[string]any
	}{
		{"system, call, two results", []map[string]any{
			{"role": "system", "content": "Be brief."},
			{"role": "user", "content": "Weather in Paris?"},
			{"role": "assistant", "content": "", "tool_calls": call},
			{"role": "tool", "content": "22C"},
			{"role": "tool", "content": "sunny"},
		}},
		{"no system, content before the call", []map[string]any{
			{"role": "user", "content": "Weather in Paris?"},
			{"role": "assistant", "content": "Let me check.", "tool_calls": call},
			{"role": "tool", "content": "22C"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{AddGenerationPrompt: true, Tools: []any{fallbackWeather}}
			want, err := qwen.Render(tc.msgs, opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Fallback().Render(tc.msgs, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("fallback %q\nQwen3    %q", got, want)
			}
		})
	}
}
