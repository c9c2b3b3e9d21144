package chat

import (
	"bytes"
	"encoding/json"
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
)

func (f ToolFormat) String() string {
	return [...]string{"hermes", "llama3", "mistral"}[f]
}

// DetectToolFormat picks the tool-call format a chat template teaches its model, from the
// markers it renders; Hermes-style tags when it shows none.
func DetectToolFormat(template string) ToolFormat {
	switch {
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
// what was held back. A held-back part that does not parse as calls is returned as content.
type ToolParser struct {
	f       ToolFormat
	held    strings.Builder // text from the first possible tool-call start on
	sent    bool            // content has been emitted (a Llama 3 call must start the reply)
	holding bool
	pending string // a suffix that may be the start of a marker
}

// NewToolParser makes a parser for one reply in format f.
func NewToolParser(f ToolFormat) *ToolParser { return &ToolParser{f: f} }

// marker starts a call in the tagged formats.
func (p *ToolParser) marker() string {
	if p.f == ToolMistral {
		return "[TOOL_CALLS]"
	}
	return "<tool_call>"
}

// Add takes the next piece of generated text and returns the part to stream as content now.
func (p *ToolParser) Add(delta string) string {
	if p.holding {
		p.held.WriteString(delta)
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
			p.held.WriteString(text)
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
		p.held.WriteString(text[i:])
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
	if !ok {
		return rest + held, nil
	}
	return rest, calls
}

// ParseToolCalls splits a whole reply into content and tool calls.
func ParseToolCalls(f ToolFormat, text string) (string, []ToolCall) {
	p := NewToolParser(f)
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
	compact, _ := json.Marshal(obj)
	return ToolCall{Name: c.Name, Arguments: string(compact)}, true
}

func parseHermes(s string) ([]ToolCall, bool) {
	var calls []ToolCall
	for {
		s = strings.TrimSpace(s)
		if s == "" {
			return calls, len(calls) > 0
		}
		body, ok := strings.CutPrefix(s, "<tool_call>")
		if !ok {
			return nil, false
		}
		end := strings.Index(body, "</tool_call>")
		if end < 0 {
			end = len(body) // the model stopped at its end-of-turn token before closing the tag
		}
		var c callJSON
		if json.Unmarshal([]byte(strings.TrimSpace(body[:end])), &c) != nil {
			return nil, false
		}
		tc, ok := c.toolCall()
		if !ok {
			return nil, false
		}
		calls = append(calls, tc)
		s = strings.TrimPrefix(body[end:], "</tool_call>")
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
	var calls []ToolCall
	for {
		s = strings.TrimSpace(s)
		if s == "" {
			return calls, len(calls) > 0
		}
		body, ok := strings.CutPrefix(s, "[TOOL_CALLS]")
		if !ok {
			return nil, false
		}
		body = strings.TrimSpace(body)
		if strings.HasPrefix(body, "[") { // a JSON list of calls
			dec := json.NewDecoder(strings.NewReader(body))
			var list []callJSON
			if dec.Decode(&list) != nil || len(list) == 0 {
				return nil, false
			}
			for _, c := range list {
				tc, ok := c.toolCall()
				if !ok {
					return nil, false
				}
				calls = append(calls, tc)
			}
			s = body[dec.InputOffset():]
			continue
		}
		name, args, ok := strings.Cut(body, "[ARGS]") // name[ARGS]{...}
		if !ok {
			return nil, false
		}
		dec := json.NewDecoder(strings.NewReader(args))
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return nil, false
		}
		tc, ok := callJSON{Name: strings.TrimSpace(name), Arguments: raw}.toolCall()
		if !ok {
			return nil, false
		}
		calls = append(calls, tc)
		s = args[dec.InputOffset():]
	}
}
