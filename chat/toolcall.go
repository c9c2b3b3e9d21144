package chat

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// ToolFormat is how a model family writes tool calls in its output.
type ToolFormat int

const (
	// ToolHermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, repeated (Hermes,
	// Qwen 2.5/3, Granite and many fine-tunes).
	ToolHermes ToolFormat = iota
	// ToolLlama3: a bare JSON object {"name": ..., "parameters": {...}}, optionally after
	// <|python_tag|>, several separated by ";" (Llama 3.1-3.3).
	ToolLlama3
	// ToolMistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Mistral Nemo, Small
	// 3.1), or [TOOL_CALLS]name[ARGS]{...}, repeated (Mistral Small 3.2, Devstral).
	ToolMistral
	// ToolHarmony: gpt-oss's harmony messages addressed to a function,
	// <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...} (see harmony.go).
	ToolHarmony
)

func (f ToolFormat) String() string {
	return [...]string{"hermes", "llama3", "mistral", "harmony"}[f]
}

// DetectToolFormat picks the tool-call format a chat template teaches its model, from the
// markers it renders; Hermes-style tags when it shows none.
func DetectToolFormat(template string) ToolFormat {
	switch {
	case strings.Contains(template, hChannel):
		return ToolHarmony
	case strings.Contains(template, "[TOOL_CALLS]"):
		return ToolMistral
	case strings.Contains(template, "<tool_call>"):
		return ToolHermes
	case strings.Contains(template, "<|python_tag|>"), strings.Contains(template, "<|start_header_id|>") && strings.Contains(template, `"parameters"`):
		return ToolLlama3
	}
	return ToolHermes
}

// ToolCall is one parsed call: the function's name and its arguments as JSON object text.
type ToolCall struct {
	Name      string
	Arguments string
}

// ToolParser splits a streamed reply into content and tool calls. Add returns the text that is
// certainly content, holding back from the first possible start of a tool call; Finish parses
// what was held back. A held-back part that does not parse as calls, or that calls a function
// not among the parser's names, is returned as content.
type ToolParser struct {
	f       ToolFormat
	names   []string        // the functions the client offered
	held    strings.Builder // text from the first possible tool-call start on
	sent    bool            // content has been emitted (a Llama 3 call must start the reply)
	holding bool
	pending string        // a suffix that may be the start of a marker
	stream  *callStream   // with StreamCalls: the calls read as they arrive
	harmony *harmonyCalls // ToolHarmony reads messages, not markers: the other fields are unused
}

// NewToolParser makes a parser for one reply in format f. names are the functions the request
// offered: only calls of those are tool calls, since a client cannot run any other (a model may
// well invent one, or be talked into it). With no names every reply is content.
func NewToolParser(f ToolFormat, names []string) *ToolParser {
	p := &ToolParser{f: f, names: names}
	if f == ToolHarmony {
		p.harmony = &harmonyCalls{sc: newHarmonyScanner(), names: names}
	}
	return p
}

// marker starts a call in the tagged formats.
func (p *ToolParser) marker() string {
	if p.f == ToolMistral {
		return "[TOOL_CALLS]"
	}
	return "<tool_call>"
}

// StreamCalls makes the parser read calls as they arrive: once a call's function is known to
// be one of the parser's names, TakeDeltas returns its name, then its arguments as the model
// writes them. Finish still parses the whole held text, and sends what the stream has not;
// where that parse fails after calls went out, the calls stand as sent (see callStream.settle).
func (p *ToolParser) StreamCalls() {
	if p.harmony != nil {
		p.harmony.stream = true
		return
	}
	p.stream = &callStream{f: p.f, names: p.names}
}

// TakeDeltas returns the deltas of streamed calls queued by Add and Finish since the last
// call; the slice is the parser's, valid until the next Add or Finish.
func (p *ToolParser) TakeDeltas() []ToolDelta {
	if p.harmony != nil {
		return p.harmony.takeDeltas()
	}
	if p.stream == nil {
		return nil
	}
	d := p.stream.deltas
	p.stream.deltas = p.stream.deltas[:0]
	return d
}

// hold keeps s, text from the first possible start of a call on, for Finish (and the stream).
func (p *ToolParser) hold(s string) {
	p.held.WriteString(s)
	if p.stream != nil {
		p.stream.feed(s)
	}
}

// Add takes the next piece of generated text and returns the part to stream as content now.
func (p *ToolParser) Add(delta string) string {
	if p.harmony != nil {
		return p.harmony.add(delta)
	}
	if p.holding {
		p.hold(delta)
		return ""
	}
	text := p.pending + delta
	p.pending = ""
	if p.f == ToolLlama3 {
		// A Llama 3 call is the whole reply: only a reply that starts with one is held.
		if p.sent {
			return text
		}
		trimmed := strings.TrimLeft(text, " \n\t")
		switch {
		case trimmed == "":
			p.pending = text
			return ""
		case strings.HasPrefix(trimmed, "{") || strings.HasPrefix(trimmed, "<|python_tag|>"):
			p.holding = true
			p.hold(text)
			return ""
		case strings.HasPrefix("<|python_tag|>", trimmed):
			p.pending = text
			return ""
		}
		p.sent = true
		return text
	}
	marker := p.marker()
	if i := strings.Index(text, marker); i >= 0 {
		p.holding = true
		p.hold(text[i:])
		return text[:i]
	}
	// Keep back a suffix that could begin the marker.
	for k := min(len(marker)-1, len(text)); k > 0; k-- {
		if strings.HasPrefix(marker, text[len(text)-k:]) {
			p.pending = text[len(text)-k:]
			return text[:len(text)-k]
		}
	}
	return text
}

// Finish ends the reply: it returns the content not yet returned and the tool calls.
func (p *ToolParser) Finish() (string, []ToolCall) {
	if p.harmony != nil {
		return p.harmony.finish()
	}
	rest := p.pending
	p.pending = ""
	if !p.holding {
		return rest, nil
	}
	held := p.held.String()
	var calls []ToolCall
	var ok bool
	switch p.f {
	case ToolHermes:
		calls, ok = parseHermes(held)
	case ToolLlama3:
		calls, ok = parseLlama3(held)
	case ToolMistral:
		calls, ok = parseMistral(held)
	}
	// One unknown function makes the whole held part content: the calls were written together,
	// and returning only some of them would hide from the client what the model answered.
	ok = ok && !slices.ContainsFunc(calls, func(c ToolCall) bool { return !slices.Contains(p.names, c.Name) })
	if p.stream != nil && p.stream.started() > 0 {
		content, sent := p.stream.settle(held, calls, ok)
		return rest + content, sent
	}
	if !ok {
		return rest + held, nil
	}
	if p.stream != nil {
		p.stream.settle(held, calls, true)
	}
	return rest, calls
}

// ParseToolCalls splits a whole reply into content and calls of the functions in names (see
// NewToolParser).
func ParseToolCalls(f ToolFormat, text string, names []string) (string, []ToolCall) {
	p := NewToolParser(f, names)
	content := p.Add(text)
	rest, calls := p.Finish()
	return content + rest, calls
}

// callJSON is one call as the families write it; Llama 3 says "parameters".
type callJSON struct {
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Parameters json.RawMessage `json:"parameters"`
}

func (c callJSON) toolCall() (ToolCall, bool) {
	args := c.Arguments
	if len(args) == 0 {
		args = c.Parameters
	}
	args = bytes.TrimSpace(args)
	if len(args) == 0 {
		args = []byte("{}")
	}
	if c.Name == "" {
		return ToolCall{}, false
	}
	// Some models write the arguments as a JSON string holding the object.
	var s string
	if json.Unmarshal(args, &s) == nil {
		args = []byte(s)
	}
	var obj map[string]any
	if json.Unmarshal(args, &obj) != nil {
		return ToolCall{}, false
	}
	// The model's text without its blanks (json.Compact): its keys in its order and its numbers
	// as written (a float64 would round large integers), and what a streamed call's argument
	// deltas, read the same way, join into. Compact does no HTML escaping: "<" stays.
	var compact bytes.Buffer
	if json.Compact(&compact, args) != nil {
		return ToolCall{}, false
	}
	return ToolCall{Name: c.Name, Arguments: compact.String()}, true
}

func parseHermes(s string) ([]ToolCall, bool) {
	return parseTagged(s, "<tool_call>", func(body string) ([]ToolCall, string, bool) {
		// The JSON is decoded first and the closing tag looked for after it, so that a
		// "</tool_call>" inside a string of the arguments does not cut the call short.
		dec := json.NewDecoder(strings.NewReader(body))
		var c callJSON
		if dec.Decode(&c) != nil {
			return nil, "", false
		}
		tc, ok := c.toolCall()
		if !ok {
			return nil, "", false
		}
		rest := strings.TrimSpace(body[dec.InputOffset():])
		// An unclosed tag is accepted at the end only: the model stopped at its end-of-turn
		// token before closing it.
		after, closed := strings.CutPrefix(rest, "</tool_call>")
		return []ToolCall{tc}, after, closed || rest == ""
	})
}

// parseTagged parses s as one or more segments (blanks around them allowed), each opened by tag
// and read by body: given the text after the tag, it returns the segment's calls and the text
// after them, or false. Anything else in s fails the whole parse.
func parseTagged(s, tag string, body func(string) ([]ToolCall, string, bool)) ([]ToolCall, bool) {
	var calls []ToolCall
	for {
		s = strings.TrimSpace(s)
		if s == "" {
			return calls, len(calls) > 0
		}
		rest, ok := strings.CutPrefix(s, tag)
		if !ok {
			return nil, false
		}
		found, after, ok := body(rest)
		if !ok {
			return nil, false
		}
		calls, s = append(calls, found...), after
	}
}

func parseLlama3(s string) ([]ToolCall, bool) {
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "<|python_tag|>"))
	dec := json.NewDecoder(strings.NewReader(s))
	var calls []ToolCall
	for {
		var c callJSON
		if err := dec.Decode(&c); err != nil {
			return nil, false
		}
		tc, ok := c.toolCall()
		if !ok {
			return nil, false
		}
		calls = append(calls, tc)
		rest := strings.TrimLeft(s[dec.InputOffset():], " \n\t;")
		if rest == "" {
			return calls, true
		}
		s = rest
		dec = json.NewDecoder(strings.NewReader(s))
	}
}

func parseMistral(s string) ([]ToolCall, bool) {
	return parseTagged(s, "[TOOL_CALLS]", func(body string) ([]ToolCall, string, bool) {
		body = strings.TrimSpace(body)
		if strings.HasPrefix(body, "[") { // a JSON list of calls
			dec := json.NewDecoder(strings.NewReader(body))
			var list []callJSON
			if dec.Decode(&list) != nil || len(list) == 0 {
				return nil, "", false
			}
			calls := make([]ToolCall, len(list))
			for i, c := range list {
				var ok bool
				if calls[i], ok = c.toolCall(); !ok {
					return nil, "", false
				}
			}
			return calls, body[dec.InputOffset():], true
		}
		name, args, ok := strings.Cut(body, "[ARGS]") // name[ARGS]{...}
		if !ok {
			return nil, "", false
		}
		dec := json.NewDecoder(strings.NewReader(args))
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return nil, "", false
		}
		tc, ok := callJSON{Name: strings.TrimSpace(name), Arguments: raw}.toolCall()
		return []ToolCall{tc}, args[dec.InputOffset():], ok
	})
}
