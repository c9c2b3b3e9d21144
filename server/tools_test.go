package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"ubatch/chat"
	"ubatch/grammar"
)

// toolsNCtx is the context of the tool tests' engines: the ChatML fallback the test model is
// prompted with shows the tools, some 400 tokens of this model's small vocabulary for one.
const toolsNCtx = 2048

// toolChatResponse is the part of a chat completion the tool tests read.
type toolChatResponse struct {
	Choices []struct {
		Message struct {
			Content   *string        `json:"content"`
			ToolCalls []ToolCallJSON `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

var weatherTool = []map[string]any{{
	"type": "function",
	"function": map[string]any{
		"name": "get_weather",
		"parameters": map[string]any{
			"type":       "object",
			"properties": map[string]any{"city": map[string]any{"type": "string", "maxLength": 12}},
			"required":   []string{"city"},
		},
	},
}}

// TestToolCallsForced: with tool_choice required (and a named function) the grammar makes even
// the tiny story model call the tool; the reply carries OpenAI tool_calls whose arguments follow
// the parameters' schema, non-streamed and as streamed deltas.
func TestToolCallsForced(t *testing.T) {
	e := newEnv(t, envOptions{nCtx: toolsNCtx})
	for _, choice := range []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}} {
		body := map[string]any{
			"messages":    []map[string]string{{"role": "user", "content": "What is the weather in Paris?"}},
			"tools":       weatherTool,
			"tool_choice": choice,
			"max_tokens":  96,
			"temperature": 0,
		}
		var resp toolChatResponse
		e.PostJSON("/v1/chat/completions", body, http.StatusOK, &resp)
		if len(resp.Choices) != 1 || len(resp.Choices[0].Message.ToolCalls) != 1 {
			t.Fatalf("%v: want one tool call, got %+v", choice, resp)
		}
		c := resp.Choices[0]
		call := c.Message.ToolCalls[0]
		var args struct {
			City *string `json:"city"`
		}
		if call.Function.Name != "get_weather" || json.Unmarshal([]byte(call.Function.Arguments), &args) != nil || args.City == nil ||
			call.Type != "function" || !strings.HasPrefix(call.ID, "call_") || c.FinishReason != "tool_calls" || c.Message.Content != nil {
			t.Errorf("%v: call %+v, finish %q, content %v", choice, call, c.FinishReason, c.Message.Content)
		}

		// Streamed, the call comes as deltas (TestToolCallsStreamedDeltas) that join into it.
		st := e.streamChat(body)
		if strings.Contains(st.content.String(), "<tool_call>") {
			t.Errorf("the tool-call markup leaked into the streamed content: %q", st.content.String())
		}
		if len(st.calls) != 1 || st.calls[0].Function.Name != "get_weather" || st.calls[0].Function.Arguments != call.Function.Arguments || st.finish != "tool_calls" {
			t.Errorf("%v: streamed calls %+v, finish %q; non-streamed %+v", choice, st.calls, st.finish, call)
		}
	}
}

func TestToolRequests(t *testing.T) {
	e := newEnv(t, envOptions{nCtx: toolsNCtx})
	// A tool result sent back: the assistant's call (arguments as JSON text) and the tool's
	// answer render through the template.
	var resp map[string]any
	e.PostJSON("/v1/chat/completions", map[string]any{
		"messages": []map[string]any{
			{"role": "user", "content": "Weather in Paris?"},
			{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": "call_1", "type": "function",
				"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}},
			{"role": "tool", "tool_call_id": "call_1", "content": "22C"},
		},
		"tools": weatherTool, "max_tokens": 4,
	}, http.StatusOK, &resp)
	for _, tc := range []struct{ name, body, param, msg string }{
		{"choice without tools", `{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, "tool_choice", ""},
		{"unknown choice", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"always"}`, "tool_choice", ""},
		{"named function absent", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice", ""},
		{"bad tools", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"retrieval"}]}`, "tools", ""},
		{"forced plus schema", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","response_format":{"type":"json_object"}}`, "tool_choice", ""},
		// Names as OpenAI accepts them, reported at the tool at fault.
		{"name with closing tag", toolsBody(`"auto"`, `{"name":"a"}`, `{"name":"b"}`, `{"name":"x</tool_call>"}`), "tools[2].function.name", ""},
		{"name missing", toolsBody(`"auto"`, `{}`), "tools[0].function.name", ""},
		{"name empty", toolsBody(`"required"`, `{"name":""}`), "tools[0].function.name", ""},
		{"name with space", toolsBody(`"auto"`, `{"name":"a"}`, `{"name":"get weather"}`), "tools[1].function.name", ""},
		{"name with quote", toolsBody(`"auto"`, `{"name":"a\"b"}`), "tools[0].function.name", ""},
		{"name with dot", toolsBody(`"auto"`, `{"name":"a.b"}`), "tools[0].function.name", ""},
		{"name not ASCII", toolsBody(`"auto"`, `{"name":"météo"}`), "tools[0].function.name", ""},
		{"name of 65 characters", toolsBody(`"auto"`, `{"name":"`+strings.Repeat("a", 65)+`"}`), "tools[0].function.name", ""},
		{"name not a string", toolsBody(`"auto"`, `{"name":7}`), "tools", ""},
		// Parameters: an object whose $refs resolve inside it, whatever tool_choice is.
		{"parameters not an object", toolsBody(`"auto"`, `{"name":"f","parameters":[1]}`), "tools[0].function.parameters", ""},
		{"dangling ref auto", toolsBody(`"auto"`, `{"name":"f"}`, `{"name":"g","parameters":{"type":"object","properties":{"x":{"$ref":"#/$defs/missing"}}}}`), "tools[1].function.parameters", ""},
		{"dangling ref required", toolsBody(`"required"`, `{"name":"f","parameters":{"$ref":"#/definitions/node"}}`), "tools[0].function.parameters", ""},
		{"dangling ref in items", toolsBody(`"none"`, `{"name":"f","parameters":{"type":"object","properties":{"l":{"type":"array","items":[{"$ref":"#/properties/nope"}]}}}}`), "tools[0].function.parameters", ""},
		{"ref to the wrapper", toolsBody(`"required"`, `{"name":"f","parameters":{"type":"object","properties":{"x":{"$ref":"#/anyOf/0"}}}}`), "tools[0].function.parameters", ""},
		{"ref out of the document", toolsBody(`"auto"`, `{"name":"f","parameters":{"$ref":"https://example.com/s.json"}}`), "tools[0].function.parameters", ""},
		{"ref to a keyword value", toolsBody(`"auto"`, `{"name":"f","parameters":{"type":"object","properties":{"x":{"$ref":"#/type"}}}}`), "tools[0].function.parameters", ""},
		{"ref not a string", toolsBody(`"auto"`, `{"name":"f","parameters":{"$ref":1}}`), "tools[0].function.parameters", ""},
		{"unsupported keyword required", toolsBody(`"required"`, `{"name":"f"}`, `{"name":"g","parameters":{"type":"object","properties":{"n":{"type":"number","multipleOf":3}}}}`), "tools[1].function.parameters", ""},
		// Caps on what the client sizes.
		{"too many tools", toolsBody(`"auto"`, manyTools(DefaultMaxTools+1, "")...), "tools", "at most 128"},
		{"schemas too large", toolsBody(`"auto"`, manyTools(2, strings.Repeat("x", DefaultMaxToolsBytes/2))...), "tools", "262144 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.Post(context.Background(), "/v1/chat/completions", tc.body)
			defer r.Body.Close()
			d := checkError(t, r, http.StatusBadRequest, "invalid_request_error")
			if d.Param == nil || *d.Param != tc.param {
				t.Errorf("param %v, want %q (%s)", d.Param, tc.param, d.Message)
			}
			if !strings.Contains(d.Message, tc.msg) {
				t.Errorf("message %q does not say %q", d.Message, tc.msg)
			}
		})
	}
}

// toolsBody is a chat request body offering the functions fns (JSON objects) with tool_choice.
func toolsBody(choice string, fns ...string) string {
	tools := make([]string, len(fns))
	for i, f := range fns {
		tools[i] = `{"type":"function","function":` + f + `}`
	}
	return `{"messages":[{"role":"user","content":"x"}],"max_tokens":1,"tool_choice":` + choice + `,"tools":[` + strings.Join(tools, ",") + `]}`
}

// manyTools is n functions named f0, f1, ... whose parameters carry a description of desc.
func manyTools(n int, desc string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"name":"f%d","parameters":{"type":"object","description":%q}}`, i, desc)
	}
	return out
}

// bigGrammarTool is a function whose parameters, 3 KB of schema, convert to over 4 MiB of GBNF:
// each of its patterns' 20000 repeats is written out.
// TestToolGrammarCap: the call grammar of all the tools together is refused past
// maxToolGrammarBytes, though each tool's is within the converter's limits. (Through the API the
// tools' parameters are capped first, at DefaultMaxToolsBytes, which converts to less.)
func TestToolGrammarCap(t *testing.T) {
	words := make([]string, 2000)
	for i := range words {
		words[i] = fmt.Sprintf("%q", fmt.Sprintf("word-%05d-%s", i, strings.Repeat("x", 12)))
	}
	params := `{"type":"object","properties":{"w":{"enum":[` + strings.Join(words, ",") + `]}}}`
	var tools []toolFunction
	var allowed []int
	for i := range 120 {
		var tf toolFunction
		if err := json.Unmarshal([]byte(fmt.Sprintf(`{"type":"function","function":{"name":"f%d","parameters":%s}}`, i, params)), &tf); err != nil {
			t.Fatal(err)
		}
		tools, allowed = append(tools, tf), append(allowed, i)
	}
	if _, err := toolCallGrammar(context.Background(), chat.ToolHermes, tools[:1], allowed[:1], grammar.Limits{}); err != nil {
		t.Fatalf("one tool: %v", err)
	}
	// The byte cap, not the compile time limit a loaded machine under -race can reach first.
	_, err := toolCallGrammar(context.Background(), chat.ToolHermes, tools, allowed, grammar.Limits{MaxTime: time.Minute})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Param != "tools" || !strings.Contains(ae.Message, strconv.Itoa(maxToolGrammarBytes)+" bytes") {
		t.Fatalf("120 tools of a %d-byte schema each: %v, want a 400 on tools naming the %d-byte cap", len(params), err, maxToolGrammarBytes)
	}
}

// TestToolRequestsAccepted: what is at the edge of the checks passes them, and tool_choice
// required compiles its grammar. toolSetup is called directly: the larger of these tool lists
// would not fit the test model's context once rendered.
func TestToolRequestsAccepted(t *testing.T) {
	e := newEnv(t, envOptions{})
	tree := `{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#"}}},"required":["value"]}`
	for _, tc := range []struct{ name, body string }{
		{"name of 64 characters", toolsBody(`"auto"`, `{"name":"`+strings.Repeat("a", 64)+`"}`)},
		{"name of every class", toolsBody(`"required"`, `{"name":"Get_weather-2"}`)},
		{"as many tools as allowed", toolsBody(`"auto"`, manyTools(DefaultMaxTools, "")...)},
		{"as many tools as allowed, required", toolsBody(`"required"`, manyTools(DefaultMaxTools, "")...)},
		{"schemas as large as allowed", toolsBody(`"required"`, manyTools(2, strings.Repeat("x", DefaultMaxToolsBytes/2-100))...)},
		{"recursive ref auto", toolsBody(`"auto"`, `{"name":"tree","parameters":`+tree+`}`)},
		{"recursive ref required", toolsBody(`"required"`, `{"name":"tree","parameters":`+tree+`}`)},
		{"refs into defs and properties", toolsBody(`"required"`, `{"name":"f","parameters":{"type":"object","$defs":{"a/b":{"type":"integer"}},"properties":{"x":{"$ref":"#/$defs/a~1b"},"y":{"$ref":"#/properties/x"}}}}`)},
		{"ref-like data is not a ref", toolsBody(`"auto"`, `{"name":"f","parameters":{"type":"object","properties":{"k":{"const":{"$ref":"#/nowhere"}}}}}`)},
		{"null parameters", toolsBody(`"required"`, `{"name":"f","parameters":null}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req ChatRequest
			if err := json.Unmarshal([]byte(tc.body), &req); err != nil {
				t.Fatal(err)
			}
			var g GenParams
			mode, err := e.srv.toolSetup(context.Background(), &g, &req)
			if err != nil {
				t.Fatal(err)
			}
			if mode == nil || len(mode.Names) == 0 || (string(req.ToolChoice) == `"required"`) != (g.sampling.Grammar != nil) {
				t.Errorf("mode %+v, grammar %v", mode, g.sampling.Grammar != nil)
			}
		})
	}
	// A small one is served whole.
	r := e.Post(context.Background(), "/v1/chat/completions", toolsBody(`"required"`, `{"name":"tree","parameters":`+tree+`}`))
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(r.Body)
		t.Errorf("status %d: %s", r.StatusCode, data)
	}
}

// TestToolChoiceAutoUnknownFunction: with tool_choice auto, a call the model writes of a function
// the request did not offer is the reply's content, never a tool call; a call of an offered one
// is. The model's output is forced with a grammar, as the tiny model would not write calls.
func TestToolChoiceAutoUnknownFunction(t *testing.T) {
	e := newEnv(t, envOptions{nCtx: toolsNCtx})
	for _, tc := range []struct {
		name, output string
		call         bool
	}{
		{"unknown function", `<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>`, false},
		{"offered function", `<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lit, _ := json.Marshal(strings.ReplaceAll(tc.output, `\n`, "\n"))
			body := map[string]any{
				"messages": []map[string]string{{"role": "user", "content": "Hi"}},
				"tools":    weatherTool, "tool_choice": "auto", "max_tokens": 160, "temperature": 0,
				"grammar": "root ::= " + string(lit),
			}
			var resp toolChatResponse
			e.PostJSON("/v1/chat/completions", body, http.StatusOK, &resp)
			if len(resp.Choices) != 1 {
				t.Fatalf("response %+v", resp)
			}
			c := resp.Choices[0]
			want := strings.ReplaceAll(tc.output, `\n`, "\n")
			switch {
			case tc.call && (len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "get_weather" || c.FinishReason != "tool_calls"):
				t.Errorf("want a get_weather call, got %+v", c)
			case !tc.call && (len(c.Message.ToolCalls) != 0 || c.Message.Content == nil || *c.Message.Content != want || c.FinishReason == "tool_calls"):
				t.Errorf("want the text %q as content, got %+v", want, c)
			}

			st := e.streamChat(body)
			content, calls := &st.content, st.calls
			if tc.call != (len(calls) == 1) || !tc.call && content.String() != want {
				t.Errorf("streamed: content %q, calls %+v", content.String(), calls)
			}
		})
	}
}

// TestToolCallGrammarRefs runs the grammar of tool_choice required through the matcher: each
// tool's $refs resolve inside its own parameters ("#" is the parameters object, not the call
// around it), recursion included, in every format.
func TestToolCallGrammarRefs(t *testing.T) {
	tree := `{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#"}}},"required":["value"]}`
	defsTree := `{"type":"object","$defs":{"node":{"type":"object","properties":{"v":{"type":"boolean"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"properties":{"root":{"$ref":"#/$defs/node"}},"required":["root"]}`
	pair := `{"type":"object","properties":{"a":{"type":"string","maxLength":3},"b":{"$ref":"#/properties/a"}},"required":["a","b"]}`
	hermes := func(name, args string) string {
		return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>"
	}
	for _, tc := range []struct {
		name   string
		format chat.ToolFormat
		tools  string // the request's tools, each {"name", "parameters"}
		accept []string
		reject []string
	}{
		{name: "tree by #", format: chat.ToolHermes, tools: `[{"name":"tree","parameters":` + tree + `}]`,
			accept: []string{
				hermes("tree", `{"value": 1}`),
				hermes("tree", `{"value": 1, "children": [{"value": 2, "children": [{"value": 3}, {"value": 4, "children": []}]}]}`),
			},
			reject: []string{
				hermes("tree", `{"value": 1, "children": [{"children": []}]}`),                            // a nested node without value
				hermes("tree", `{"value": 1, "children": [{"value": "2"}]}`),                              // a nested value of the wrong type
				hermes("tree", `{"value": 1, "children": [{"name": "tree", "arguments": {"value": 2}}]}`), // the call wrapper as a node
				hermes("tree", `{"children": []}`),
				hermes("other", `{"value": 1}`),
			}},
		{name: "tree by $defs", format: chat.ToolHermes, tools: `[{"name":"t","parameters":` + defsTree + `}]`,
			accept: []string{hermes("t", `{"root": {"v": true, "kids": [{"v": false, "kids": [{"v": true}]}]}}`)},
			reject: []string{hermes("t", `{"root": {"v": true, "kids": [{"kids": []}]}}`), hermes("t", `{"root": {"v": 1}}`)}},
		{name: "ref to a property", format: chat.ToolHermes, tools: `[{"name":"p","parameters":` + pair + `}]`,
			accept: []string{hermes("p", `{"a": "xy", "b": "abc"}`)},
			reject: []string{hermes("p", `{"a": "xy", "b": "abcd"}`), hermes("p", `{"a": "xy", "b": 1}`)}},
		{name: "two tools, each # its own", format: chat.ToolHermes,
			tools: `[{"name":"tree","parameters":` + tree + `},{"name":"list","parameters":{"type":"object","properties":{"next":{"$ref":"#"},"s":{"type":"string"}},"required":["s"]}}]`,
			accept: []string{
				hermes("tree", `{"value": 1, "children": [{"value": 2}]}`),
				hermes("list", `{"s": "a", "next": {"s": "b"}}`),
			},
			reject: []string{
				hermes("tree", `{"value": 1, "children": [{"s": "a"}]}`), // a list node inside the tree
				hermes("list", `{"s": "a", "next": {"value": 1}}`),       // a tree node inside the list
			}},
		{name: "llama3 tree", format: chat.ToolLlama3, tools: `[{"name":"tree","parameters":` + tree + `}]`,
			accept: []string{`{"name": "tree", "parameters": {"value": 1, "children": [{"value": 2}]}}`},
			reject: []string{`{"name": "tree", "parameters": {"value": 1, "children": [{"name": "tree", "parameters": {"value": 2}}]}}`,
				`{"name": "tree", "arguments": {"value": 1}}`}},
		{name: "mistral tree", format: chat.ToolMistral, tools: `[{"name":"tree","parameters":` + tree + `}]`,
			accept: []string{`[TOOL_CALLS][{"name": "tree", "arguments": {"value": 1, "children": [{"value": 2}]}}]`},
			reject: []string{`[TOOL_CALLS][{"name": "tree", "arguments": {"value": 1, "children": [{"name": "tree", "arguments": {"value": 2}}]}}]`}},
		{name: "no parameters", format: chat.ToolHermes, tools: `[{"name":"now"}]`,
			accept: []string{hermes("now", `{}`)},
			reject: []string{hermes("now", `{"x": 1}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fns []json.RawMessage
			if err := json.Unmarshal([]byte(tc.tools), &fns); err != nil {
				t.Fatal(err)
			}
			items := make([]string, len(fns))
			allowed := make([]int, len(fns))
			for i, f := range fns {
				items[i] = `{"type":"function","function":` + string(f) + `}`
				allowed[i] = i
			}
			tools, err := parseTools(json.RawMessage("["+strings.Join(items, ",")+"]"), RequestLimits{}.withDefaults())
			if err != nil {
				t.Fatal(err)
			}
			src, err := toolCallGrammar(context.Background(), tc.format, tools, allowed, grammar.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			g, err := grammar.Parse(src)
			if err != nil {
				t.Fatalf("%v\n%s", err, src)
			}
			matches := func(s string) bool {
				m := grammar.NewMatcher(g, nil)
				return m.AcceptBytes([]byte(s)) == nil && m.Complete()
			}
			for _, s := range tc.accept {
				if !matches(s) {
					t.Errorf("rejects %s\ngrammar:\n%s", s, src)
				}
			}
			for _, s := range tc.reject {
				if matches(s) {
					t.Errorf("accepts %s\ngrammar:\n%s", s, src)
				}
			}
		})
	}
}

// TestPrefixRules: every rule name is prefixed, where defined and where used; literals,
// character classes and repetition bounds are left as they are.
func TestPrefixRules(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
		fail            bool
	}{
		{name: "names and uses", src: "root ::= a b-1\na ::= \"x\"\nb-1 ::= a | root\n", want: "p-root ::= p-a p-b-1\np-a ::= \"x\"\np-b-1 ::= p-a | p-root\n"},
		{name: "literal with names and escapes", src: `r ::= "a \"b\" \\" c` + "\n", want: `p-r ::= "a \"b\" \\" p-c` + "\n"},
		{name: "class with escaped bracket", src: `r ::= [^"\\\]a-z] x` + "\n", want: `p-r ::= [^"\\\]a-z] p-x` + "\n"},
		{name: "bounds", src: "r ::= x{0,16} [0-9]{4}\n", want: "p-r ::= p-x{0,16} [0-9]{4}\n"},
		{name: "unterminated literal", src: `r ::= "abc`, fail: true},
		{name: "unterminated class", src: `r ::= [abc\]`, fail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := prefixRules(tc.src, "p-")
			if tc.fail {
				if err == nil {
					t.Errorf("got %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v\nwant %q", got, err, tc.want)
			}
		})
	}
}
