package chat

import (
	"slices"
	"strings"
	"testing"
)

// TestToolParserStream: calls of offered functions stream as deltas (the name first, then the
// arguments as they arrive) that join into the calls Finish returns, which are the whole
// parse's; text that is not a call of an offered function streams nothing and ends as content.
func TestToolParserStream(t *testing.T) {
	names := []string{"get_weather", "get_time"}
	for _, tc := range []struct {
		name    string
		f       ToolFormat
		text    string
		content string
		calls   []ToolCall
		early   bool // the first call's name goes out before Finish
	}{
		{"hermes", ToolHermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>", "",
			[]ToolCall{{"get_weather", `{"city":"Paris","days":[1,2]}`}}, true},
		{"hermes two, text first", ToolHermes, "See: <tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"a b\"}}</tool_call>\n<tool_call>{\"arguments\": {\"tz\": \"CET\"}, \"name\": \"get_time\"}</tool_call>", "See: ",
			[]ToolCall{{"get_weather", `{"city":"a b"}`}, {"get_time", `{"tz":"CET"}`}}, true},
		{"hermes escapes and nesting", ToolHermes, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"q\": \"say \\\"}\\\" {x}\", \"n\": {\"m\": [true, null, -1.5e3]}}}</tool_call>", "",
			[]ToolCall{{"get_weather", `{"q":"say \"}\" {x}","n":{"m":[true,null,-1.5e3]}}`}}, true},
		{"hermes string arguments", ToolHermes, "<tool_call>{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}</tool_call>", "",
			[]ToolCall{{"get_weather", `{"city":"Paris"}`}}, true},
		{"llama3", ToolLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
			[]ToolCall{{"get_weather", `{"city":"Paris"}`}}, true},
		{"llama3 python tag, two", ToolLlama3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"get_time\", \"parameters\": {\"tz\": 1}}", "",
			[]ToolCall{{"get_weather", `{"city":"Paris"}`}, {"get_time", `{"tz":1}`}}, true},
		{"mistral list", ToolMistral, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {}}]", "",
			[]ToolCall{{"get_weather", `{"city":"Paris"}`}, {"get_time", `{}`}}, true},
		{"mistral args form", ToolMistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{\"tz\":\"CET\"}", "",
			[]ToolCall{{"get_weather", `{"city":"Paris"}`}, {"get_time", `{"tz":"CET"}`}}, true},
		// Not offered: held back, then content, as the whole parse says.
		{"hermes unknown function", ToolHermes, "<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>", "<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>", nil, false},
		{"mistral unknown bare name", ToolMistral, "[TOOL_CALLS]exec[ARGS]{}", "[TOOL_CALLS]exec[ARGS]{}", nil, false},
		{"llama3 not a call", ToolLlama3, "{\"answer\": 42}", "{\"answer\": 42}", nil, false},
		// Streamed calls stand; what follows the last complete one is content.
		{"hermes known then unknown", ToolHermes, "<tool_call>{\"name\":\"get_time\",\"arguments\":{\"tz\":\"CET\"}}</tool_call><tool_call>{\"name\":\"exec\",\"arguments\":{}}</tool_call>", "<tool_call>{\"name\":\"exec\",\"arguments\":{}}</tool_call>",
			[]ToolCall{{"get_time", `{"tz":"CET"}`}}, true},
		{"hermes cut inside the arguments", ToolHermes, "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Par", "",
			[]ToolCall{{"get_weather", `{"city":"Par`}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for size := 1; size <= len(tc.text); size++ {
				p := NewToolParser(tc.f, names)
				p.StreamCalls()
				var content strings.Builder
				var deltas []ToolDelta
				early := false
				for i := 0; i < len(tc.text); i += size {
					content.WriteString(p.Add(tc.text[i:min(len(tc.text), i+size)]))
					d := p.TakeDeltas()
					early = early || len(d) > 0
					deltas = append(deltas, d...)
				}
				rest, calls := p.Finish()
				content.WriteString(rest)
				deltas = append(deltas, p.TakeDeltas()...)
				if content.String() != tc.content || !slices.Equal(calls, tc.calls) {
					t.Fatalf("pieces of %d: content %q calls %v, want %q %v", size, content.String(), calls, tc.content, tc.calls)
				}
				if got := joinDeltas(t, deltas); !slices.Equal(got, tc.calls) {
					t.Fatalf("pieces of %d: deltas %+v join into %v, want %v", size, deltas, got, tc.calls)
				}
				if size < len(tc.text) && early != tc.early {
					t.Fatalf("pieces of %d: deltas before Finish %v, want %v", size, early, tc.early)
				}
			}
		})
	}
}

// joinDeltas rebuilds calls from deltas as a client does, checking each call opens with its
// name and no arguments and that indexes come in order.
func joinDeltas(t *testing.T, deltas []ToolDelta) []ToolCall {
	t.Helper()
	var calls []ToolCall
	for _, d := range deltas {
		switch {
		case d.Name != "":
			if d.Index != len(calls) || d.Arguments != "" {
				t.Fatalf("call start %+v after %d calls", d, len(calls))
			}
			calls = append(calls, ToolCall{Name: d.Name})
		case d.Index != len(calls)-1:
			t.Fatalf("arguments %+v for call %d while call %d is open", d, d.Index, len(calls)-1)
		default:
			calls[d.Index].Arguments += d.Arguments
		}
	}
	return calls
}
