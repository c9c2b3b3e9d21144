package chat

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"ubatch/internal/testdata"
	"ubatch/internal/testkit"
)

// harmonyReply is a reply read as the server reads it: ReasoningParser, then ToolParser
// (ToolHarmony) on the content it releases.
type harmonyReply struct {
	reasoning, content string
	calls              []ToolCall
	deltas             []ToolDelta
}

// readHarmony reads text in pieces of size bytes (0: at once); split false skips the
// reasoning parser (reasoning_format none), names nil the tool parser (no tools).
func readHarmony(text string, size int, split bool, names []string, stream bool) harmonyReply {
	var out harmonyReply
	var rp *ReasoningParser
	if split {
		rp = NewReasoningParser(false)
	}
	var tp *ToolParser
	if names != nil {
		tp = NewToolParser(ToolHarmony, names)
		if stream {
			tp.StreamCalls()
		}
	}
	var rs, cs strings.Builder
	feed := func(r, c string, last bool) {
		rs.WriteString(r)
		if tp != nil {
			c = tp.Add(c)
			if last {
				rest, calls := tp.Finish()
				c += rest
				out.calls = calls
			}
			out.deltas = append(out.deltas, tp.TakeDeltas()...)
		}
		cs.WriteString(c)
	}
	if size <= 0 {
		size = len(text) + 1
	}
	for i := 0; i < len(text); i += size {
		piece := text[i:min(len(text), i+size)]
		r, c := "", piece
		if rp != nil {
			r, c = rp.Add(piece)
		}
		feed(r, c, false)
	}
	r, c := "", ""
	if rp != nil {
		r, c = rp.Finish()
	}
	feed(r, c, true)
	out.reasoning, out.content = rs.String(), cs.String()
	return out
}

const (
	hAnalysis = "<|channel|>analysis<|message|>"
	hFinal    = "<|start|>assistant<|channel|>final<|message|>"
)

func TestHarmonyParse(t *testing.T) {
	names := []string{"get_weather", "lookup"}
	type call struct{ name, args string }
	for _, tc := range []struct {
		name      string
		text      string
		split     bool // reasoning split (reasoning_format auto)
		reasoning string
		content   string
		calls     []call
		wholeOnly bool // streamed, the call stands as sent (TestHarmonyStreamedCall)
	}{
		{name: "analysis then final", split: true, text: hAnalysis + "User asks 2+2. Answer 4.<|end|>" + hFinal + "It is 4.",
			reasoning: "User asks 2+2. Answer 4.", content: "It is 4."},
		{name: "final only", split: true, text: "<|channel|>final<|message|>Hello there.", content: "Hello there."},
		{name: "final with a constraint", split: true, text: hAnalysis + "x<|end|><|start|>assistant<|channel|>final <|constrain|>json<|message|>{\"a\":1}",
			reasoning: "x", content: `{"a":1}`},
		{name: "analysis only, cut", split: true, text: hAnalysis + "still thinking", reasoning: "still thinking"},
		{name: "commentary preamble is content", split: true,
			text:      hAnalysis + "plan<|end|><|start|>assistant<|channel|>commentary<|message|>Let me check. <|end|>" + hFinal + "Done.",
			reasoning: "plan", content: "Let me check. Done."},
		{name: "tool call, recipient in channel", split: true,
			text:      hAnalysis + "Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
			reasoning: "Need weather.", calls: []call{{"get_weather", `{"city":"Paris"}`}}},
		{name: "tool call, recipient in role", split: true,
			text:  " to=functions.lookup<|channel|>commentary json<|message|>{\"q\": \"a b\"}",
			calls: []call{{"lookup", `{"q":"a b"}`}}},
		{name: "tool call after start, recipient in role", split: true,
			text:      hAnalysis + "t<|end|><|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{}",
			reasoning: "t", calls: []call{{"lookup", `{}`}}},
		{name: "tool call on the analysis channel", split: true,
			text:  "<|channel|>analysis to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}",
			calls: []call{{"get_weather", `{"city":"Oslo"}`}}},
		{name: "tool call ended by <|call|> text", split: true,
			text:  "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>",
			calls: []call{{"get_weather", `{"city":"Oslo"}`}}},
		{name: "arguments as a JSON string", split: true,
			text:  "<|channel|>commentary to=functions.lookup json<|message|>\"{\\\"q\\\": 1}\"",
			calls: []call{{"lookup", `{"q":1}`}}},
		{name: "unknown function is content as written", split: true,
			text:      hAnalysis + "a<|end|><|start|>assistant<|channel|>commentary to=functions.rm_rf json<|message|>{}",
			reasoning: "a", content: "<|start|>assistant<|channel|>commentary to=functions.rm_rf json<|message|>{}"},
		{name: "bad arguments are content as written", split: true,
			text:    "<|channel|>commentary to=functions.lookup json<|message|>{\"q\": ",
			content: "<|channel|>commentary to=functions.lookup json<|message|>{\"q\": ", wholeOnly: true},
		{name: "built-in tool is content", split: true,
			text:    "<|channel|>analysis to=browser.search code<|message|>{\"query\":\"x\"}",
			content: "<|channel|>analysis to=browser.search code<|message|>{\"query\":\"x\"}"},
		{name: "missing end between messages", split: true, text: hAnalysis + "think" + hFinal + "answer",
			reasoning: "think", content: "answer"},
		{name: "unknown channel is content as written", split: true, text: "<|channel|>secret<|message|>x<|end|>",
			content: "<|channel|>secret<|message|>x<|end|>"},
		{name: "header never completed", split: true, text: "<|channel|>analy", content: "<|channel|>analy"},
		{name: "only the start marker", split: true, text: "<|start|>", content: "<|start|>"},
		{name: "not harmony", split: true, text: "Plain answer with <|channel|> inside.", content: "Plain answer with <|channel|> inside."},
		{name: "looks like a recipient but is text", split: true, text: "to=functions are maps", content: "to=functions are maps"},
		{name: "junk between messages is content", split: true, text: hAnalysis + "r<|end|>junk" + hFinal + "c",
			reasoning: "r", content: "junkc"},
		{name: "split off: text as written, calls still read", split: false,
			text:    hAnalysis + "r<|end|><|start|>assistant<|channel|>commentary to=functions.lookup json<|message|>{\"q\":2}",
			content: hAnalysis + "r<|end|>", calls: []call{{"lookup", `{"q":2}`}}},
		{name: "content before and after a call", split: true,
			text:    "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.lookup json<|message|>{\"q\":3}<|end|>" + hFinal + "ok",
			content: "Checking.ok", calls: []call{{"lookup", `{"q":3}`}}},
		{name: "markers inside a think reply are not harmony", split: true, text: "<think>a</think><|channel|>final<|message|>b",
			reasoning: "a", content: "<|channel|>final<|message|>b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				if stream && tc.wholeOnly {
					continue
				}
				for _, size := range []int{0, 1, 2, 3, 5, 7, 11} {
					got := readHarmony(tc.text, size, tc.split, names, stream)
					if got.reasoning != tc.reasoning || got.content != tc.content {
						t.Fatalf("size %d stream %v: reasoning %q content %q, want %q %q", size, stream, got.reasoning, got.content, tc.reasoning, tc.content)
					}
					if len(got.calls) != len(tc.calls) {
						t.Fatalf("size %d stream %v: calls %+v, want %+v", size, stream, got.calls, tc.calls)
					}
					for i, c := range got.calls {
						if c.Name != tc.calls[i].name || c.Arguments != tc.calls[i].args {
							t.Fatalf("size %d stream %v: call %d %+v, want %+v", size, stream, i, c, tc.calls[i])
						}
					}
					if !stream {
						if len(got.deltas) != 0 {
							t.Fatalf("size %d: deltas %+v without StreamCalls", size, got.deltas)
						}
						continue
					}
					checkDeltas(t, got)
				}
			}
		})
	}
}

// checkDeltas checks that streamed deltas rebuild the calls: a name first, then fragments.
func checkDeltas(t *testing.T, got harmonyReply) {
	t.Helper()
	built := joinDeltas(t, got.deltas)
	if !slices.Equal(built, got.calls) {
		t.Fatalf("deltas make %+v, calls %+v", built, got.calls)
	}
}

// TestHarmonyStreaming: the thought and the answer come out as they are written, and no delta
// carries a marker, however the tokens split them.
func TestHarmonyStreaming(t *testing.T) {
	text := hAnalysis + "one two three four<|end|>" + hFinal + "five six seven"
	for size := 1; size <= 12; size++ {
		rp := NewReasoningParser(false)
		var reasoningDeltas, contentDeltas int
		var rs, cs strings.Builder
		for i := 0; i < len(text); i += size {
			r, c := rp.Add(text[i:min(len(text), i+size)])
			for _, d := range []string{r, c} {
				if strings.Contains(d, "<|") || strings.Contains(d, "|>") {
					t.Fatalf("size %d: delta %q carries markup", size, d)
				}
			}
			if r != "" {
				reasoningDeltas++
			}
			if c != "" {
				contentDeltas++
			}
			rs.WriteString(r)
			cs.WriteString(c)
		}
		r, c := rp.Finish()
		rs.WriteString(r)
		cs.WriteString(c)
		if rs.String() != "one two three four" || cs.String() != "five six seven" {
			t.Fatalf("size %d: reasoning %q content %q", size, rs.String(), cs.String())
		}
		if size < 8 && (reasoningDeltas < 2 || contentDeltas < 2) {
			t.Fatalf("size %d: %d reasoning and %d content deltas, want them as they are written", size, reasoningDeltas, contentDeltas)
		}
	}
}

// TestHarmonyStreamedCall: a call's name goes out once its header is read, before its
// arguments end; a call cut inside its arguments stands as streamed (max_tokens).
func TestHarmonyStreamedCall(t *testing.T) {
	head := "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
	p := NewToolParser(ToolHarmony, []string{"get_weather"})
	p.StreamCalls()
	if c := p.Add(head + `{"city": "Pa`); c != "" {
		t.Fatalf("content %q before the call", c)
	}
	d := p.TakeDeltas()
	if len(d) != 2 || d[0].Name != "get_weather" || d[1].Arguments != `{"city":"Pa` {
		t.Fatalf("deltas %+v, want the name then the arguments so far", d)
	}
	rest, calls := p.Finish()
	if rest != "" || len(calls) != 1 || calls[0].Arguments != `{"city":"Pa` {
		t.Fatalf("cut call: content %q calls %+v, want the call as streamed", rest, calls)
	}
	if d := p.TakeDeltas(); len(d) != 0 {
		t.Fatalf("deltas %+v after a cut call", d)
	}
}

func TestDetectHarmony(t *testing.T) {
	for _, tc := range []struct {
		name      string
		template  string
		reasoning ReasoningFormat
		tools     ToolFormat
	}{
		{"gpt-oss", `{{- "<|start|>assistant<|channel|>final<|message|>" }}`, ReasoningHarmony, ToolHarmony},
		{"qwen3", `<think>{{ x }}</think><tool_call>`, ReasoningThink, ToolHermes},
		{"plain", `{{ messages }}`, ReasoningNone, ToolHermes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if f := DetectReasoningFormat(tc.template); f != tc.reasoning {
				t.Errorf("reasoning format %v, want %v", f, tc.reasoning)
			}
			if f := DetectToolFormat(tc.template); f != tc.tools {
				t.Errorf("tool format %v, want %v", f, tc.tools)
			}
		})
	}
}

// TestHarmonyLongText: a long reply of would-be headers that never end is read in time linear
// in its length, as content, fed at once or in pieces.
func TestHarmonyLongText(t *testing.T) {
	text := strings.Repeat("<|start|>", 200000) // 1.8 MB, every header cut short by the next
	for _, size := range []int{0, 1000, 7} {
		start := time.Now()
		got := readHarmony(text, size, true, []string{"f"}, true)
		if got.content != text || got.reasoning != "" || len(got.calls) != 0 {
			t.Fatalf("size %d: the text is not content as written (%d bytes of %d)", size, len(got.content), len(text))
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("size %d: %v to read %d bytes", size, d, len(text))
		}
	}
}

// FuzzHarmony: any output, in any pieces, parses without a panic into the same texts as the
// whole, and the parts it returns are made of the output's bytes (valid UTF-8 stays valid).
func FuzzHarmony(f *testing.F) {
	for _, s := range []string{
		hAnalysis + "a<|end|>" + hFinal + "b",
		"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\":[1,\"}\"]}",
		" to=functions.f<|channel|>commentary json<|message|>{}",
		"<|start|><|start|><|channel|><|message|><|end|><|call|>",
		"to=functions." + strings.Repeat("x", 300),
		"<think>x</think>",
	} {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, text string, size uint8) {
		names := []string{"f", "g"}
		for _, split := range []bool{false, true} {
			whole := readHarmony(text, 0, split, names, true)
			got := readHarmony(text, int(size%16)+1, split, names, true)
			if got.reasoning != whole.reasoning || got.content != whole.content || len(got.calls) != len(whole.calls) {
				t.Fatalf("split %v size %d: %+v, whole %+v", split, size%16+1, got, whole)
			}
			if len(whole.reasoning)+len(whole.content) > len(text) {
				t.Fatalf("split %v: reasoning and content longer than the text: %+v", split, whole)
			}
			if utf8.ValidString(text) && (!utf8.ValidString(whole.reasoning) || !utf8.ValidString(whole.content)) {
				t.Fatalf("split %v: invalid UTF-8 out of valid text: %+v", split, whole)
			}
			checkDeltas(t, got)
		}
	})
}

// TestHarmonyTemplate renders a tool conversation through gpt-oss's published chat template
// (../shared/templates/openai-gpt-oss-120b.jinja, from Hugging Face's openai/gpt-oss-120b as
// llama.cpp ships it): the effort in the system message, the system prompt and the tools as
// the developer message in harmony's TypeScript-like namespace, the thought of a turn that
// called a tool kept (reasoning_content, given as thinking) until a later turn answers, an
// answered turn's dropped, the tool's result from functions.NAME to the assistant on the commentary channel.
func TestHarmonyTemplate(t *testing.T) {
	tmpl := mustParse(t, string(testdata.ReadFile(t, "templates/openai-gpt-oss-120b.jinja")))
	tools := []any{json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "description": "Get the weather.",
		"parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "days": {"type": "integer"}}, "required": ["city"]}}}`)}
	history := []map[string]any{
		{"role": "system", "content": "Be brief."},
		{"role": "user", "content": "Hi"},
		{"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."},
		{"role": "user", "content": "Weather in Paris?"},
		{"role": "assistant", "content": nil, "reasoning_content": "Need the tool.",
			"tool_calls": []any{map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": map[string]any{"city": "Paris"}}}}},
		{"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
	}
	for _, tc := range []struct {
		name    string
		msgs    []map[string]any
		tools   bool
		vars    map[string]any
		want    []string
		notWant []string
	}{
		{name: "tools and history", msgs: history, tools: true, vars: map[string]any{"reasoning_effort": "high"}, want: []string{
			"<|start|>system<|message|>You are ChatGPT",
			"Reasoning: high\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>",
			"<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n// Get the weather.\ntype get_weather = (_: {\n// City name\ncity: string,\ndays?: number,\n}) => any;\n\n} // namespace functions<|end|>",
			"<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|end|>",
			"<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>",
			"<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"sunny\"<|end|><|start|>assistant",
		}, notWant: []string{"Greet back."}},
		{name: "tools, a call's thought dropped once answered", msgs: append(append([]map[string]any{}, history...),
			map[string]any{"role": "assistant", "content": "Sunny in Paris.", "reasoning_content": "Report it."},
			map[string]any{"role": "user", "content": "Thanks"}), tools: true,
			want:    []string{"<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant to=functions.get_weather", "<|channel|>final<|message|>Sunny in Paris.<|end|>"},
			notWant: []string{"Need the tool.", "Report it.", "Greet back."}},
		{name: "a call with content and a thought keeps the content", msgs: []map[string]any{
			{"role": "user", "content": "Weather?"},
			{"role": "assistant", "content": "Let me check.", "reasoning_content": "Need the tool.",
				"tool_calls": []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "arguments": map[string]any{"city": "Oslo"}}}}},
			{"role": "tool", "content": "rain"},
		}, tools: true, want: []string{"<|start|>assistant<|channel|>analysis<|message|>Let me check.<|end|><|start|>assistant to=functions.get_weather"}, notWant: []string{"Need the tool."}},
		{name: "default effort", msgs: history[1:2], want: []string{"Reasoning: medium\n\n"}, notWant: []string{"<|start|>developer"}},
		{name: "low effort", msgs: history[1:2], vars: map[string]any{"reasoning_effort": "low"}, want: []string{"Reasoning: low\n\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{AddGenerationPrompt: true, Vars: tc.vars, Now: func() time.Time { return time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC) }}
			if tc.tools {
				opts.Tools = tools
			}
			got, err := tmpl.Render(tc.msgs, opts)
			if err != nil {
				t.Fatal(err)
			}
			testkit.CheckText(t, "prompt", got, tc.want, tc.notWant)
			if !strings.HasSuffix(got, "<|start|>assistant") || !strings.Contains(got, "Current date: 2026-12-07\n") {
				t.Errorf("prompt does not end with the generation prompt or lacks the date:\n%s", got)
			}
		})
	}
}

// BenchmarkReplyParsers reads a reply of about 2 KB in 4-byte pieces (a token's text) through
// the reasoning and tool parsers, as a streamed chat reply is read: harmony against <think> and
// Hermes; b.N counts replies, pieces/op how many Add calls each made.
func BenchmarkReplyParsers(b *testing.B) {
	thought, answer := strings.Repeat("some thinking ", 70), strings.Repeat("the answer ", 90)
	for _, bc := range []struct {
		name, text string
		tools      ToolFormat
	}{
		{"harmony", hAnalysis + thought + "<|end|>" + hFinal + answer, ToolHarmony},
		{"think", "<think>" + thought + "</think>" + answer, ToolHermes},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			pieces := 0
			for b.Loop() {
				rp, tp := NewReasoningParser(false), NewToolParser(bc.tools, []string{"f"})
				tp.StreamCalls()
				for i := 0; i < len(bc.text); i += 4 {
					_, c := rp.Add(bc.text[i:min(len(bc.text), i+4)])
					tp.Add(c)
					tp.TakeDeltas()
					pieces++
				}
				_, c := rp.Finish()
				tp.Add(c)
				tp.Finish()
			}
			b.ReportMetric(float64(pieces)/float64(b.N), "pieces/op")
		})
	}
}
