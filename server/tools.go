package server

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"

	"ubatch/chat"
	"ubatch/grammar"
	"ubatch/grammar/jsonschema"
)

// toolFunction is one entry of the request's tools: {"type": "function", "function": {...}}.
type toolFunction struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// toolCallJSON is one call in OpenAI's message.tool_calls (Index only in streamed deltas).
type toolCallJSON struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolMode is how a chat request's reply is read for tool calls; nil means plain text.
type toolMode struct {
	format   chat.ToolFormat
	parallel bool // more than one call may be returned
}

// toolSetup reads tools, tool_choice and parallel_tool_calls. With tool_choice "none" (or no
// tools) the reply is text. "auto" parses whatever calls the model writes; "required" and a
// named function also constrain the output by grammar to one call of the allowed functions in
// the model's format, so it cannot answer otherwise.
func (s *Server) toolSetup(g *genParams, req *chatRequest) (*toolMode, error) {
	if isNull(req.Tools) {
		if !isNull(req.ToolChoice) {
			var choice string
			if json.Unmarshal(req.ToolChoice, &choice) != nil || choice != "none" {
				return nil, badRequest("tool_choice", "tool_choice needs tools")
			}
		}
		return nil, nil
	}
	var tools []toolFunction
	if err := json.Unmarshal(req.Tools, &tools); err != nil {
		return nil, badRequest("tools", "tools must be a list of {\"type\": \"function\", \"function\": {...}} objects")
	}
	for i, t := range tools {
		if t.Type != "function" || t.Function.Name == "" {
			return nil, badRequest("tools", "tools[%d] must have type \"function\" and a function name", i)
		}
	}
	mode := &toolMode{format: chat.DetectToolFormat(s.tmpl.Source()), parallel: req.ParallelToolCalls == nil || *req.ParallelToolCalls}
	choice, name, err := parseToolChoice(req.ToolChoice)
	if err != nil {
		return nil, err
	}
	switch choice {
	case "none":
		return nil, nil
	case "auto":
		return mode, nil
	}
	var allowed []toolFunction
	for _, t := range tools {
		if name == "" || t.Function.Name == name {
			allowed = append(allowed, t)
		}
	}
	if len(allowed) == 0 {
		return nil, badRequest("tool_choice", "tool_choice names %q, which is not among the tools", name)
	}
	if g.sampling.Grammar != nil {
		return nil, badRequest("tool_choice", "tool_choice %q cannot be combined with another output constraint", choice)
	}
	src, err := toolCallGrammar(mode.format, allowed)
	if err != nil {
		return nil, badRequest("tools", "the tools' parameters cannot be turned into a grammar: %v", err)
	}
	gr, err := grammar.Parse(src)
	if err != nil {
		return nil, badRequest("tools", "the tools' parameters give no usable grammar: %v", err)
	}
	v, err := s.grammarVocab()
	if err != nil {
		return nil, internalError(err)
	}
	g.sampling.Grammar, g.sampling.GrammarVocab = gr, v
	mode.parallel = false
	return mode, nil
}

// parseToolChoice returns "none", "auto" or "required", and the function name for
// {"type": "function", "function": {"name": ...}} (choice "required").
func parseToolChoice(raw json.RawMessage) (choice, name string, err error) {
	if isNull(raw) {
		return "auto", "", nil
	}
	if json.Unmarshal(raw, &choice) == nil {
		switch choice {
		case "none", "auto", "required":
			return choice, "", nil
		}
		return "", "", badRequest("tool_choice", "tool_choice %q: use none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}", choice)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != "function" || named.Function.Name == "" {
		return "", "", badRequest("tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	return "required", named.Function.Name, nil
}

// toolCallGrammar is GBNF for exactly one call of one of tools, written as format writes it:
// a JSON object with the function's name and its arguments following the function's parameter
// schema, inside the format's markers.
func toolCallGrammar(format chat.ToolFormat, tools []toolFunction) (string, error) {
	argsKey := "arguments"
	if format == chat.ToolLlama3 {
		argsKey = "parameters"
	}
	var branches []json.RawMessage
	for _, t := range tools {
		params := t.Function.Parameters
		if isNull(params) {
			params = json.RawMessage(`{"type": "object"}`)
		}
		name, _ := json.Marshal(t.Function.Name)
		branches = append(branches, json.RawMessage(fmt.Sprintf(
			`{"type": "object", "properties": {"name": {"const": %s}, %q: %s}, "required": ["name", %q], "additionalProperties": false}`,
			name, argsKey, bytes.TrimSpace(params), argsKey)))
	}
	schema, _ := json.Marshal(map[string]any{"anyOf": branches})
	call, err := jsonschema.Grammar(schema)
	if err != nil {
		return "", err
	}
	// The schema's grammar becomes rule "tool-call"; the root wraps it in the format's markers.
	call = strings.Replace("\n"+call, "\nroot ::=", "\ntool-call ::=", 1)
	var root string
	switch format {
	case chat.ToolLlama3:
		root = `root ::= tool-call`
	case chat.ToolMistral:
		root = `root ::= "[TOOL_CALLS][" tool-call "]"`
	default:
		root = `root ::= "<tool_call>\n" tool-call "\n</tool_call>"`
	}
	return root + call, nil
}

// toolReply turns parsed calls into OpenAI's tool_calls; parallel false keeps the first.
func toolReply(calls []chat.ToolCall, parallel bool, withIndex bool) []toolCallJSON {
	if !parallel && len(calls) > 1 {
		calls = calls[:1]
	}
	out := make([]toolCallJSON, len(calls))
	for i, c := range calls {
		out[i].ID = "call_" + rand.Text()[:24]
		out[i].Type = "function"
		out[i].Function.Name, out[i].Function.Arguments = c.Name, c.Arguments
		if withIndex {
			out[i].Index = &i
		}
	}
	return out
}
