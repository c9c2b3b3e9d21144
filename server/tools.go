package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

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

// ToolCallJSON is one call in OpenAI's message.tool_calls (Index only in streamed deltas).
type ToolCallJSON struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// ToolMode is how a chat request's reply is read for tool calls; nil means plain text.
type ToolMode struct {
	Format   chat.ToolFormat
	Parallel bool     // more than one call may be returned
	Names    []string // the functions a call may name; a call of any other is content
}

// Limits on what a client sizes in tools (RequestLimits' defaults): each tool is rendered into
// the prompt, checked, and for tool_choice required or a named function compiled into the
// grammar, so their number and their schemas' total size bound that work (the request body's
// limit alone is 4 MiB).
const (
	DefaultMaxTools      = 128
	DefaultMaxToolsBytes = 256 << 10 // the sum of the tools' parameters, as sent
	// maxToolGrammarBytes bounds the GBNF the allowed tools' parameters convert to, in all: a
	// small schema can convert to a large grammar (a pattern's repeats are written out), and
	// past this the call grammar is refused before it is copied and compiled.
	maxToolGrammarBytes = 4 << 20
)

// toolName is what OpenAI accepts as a function name. It also keeps names out of the markup
// they are written in: no quote, no "<" of a closing tag, nothing a grammar literal escapes.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// toolSetup reads tools, tool_choice and parallel_tool_calls. With tool_choice "none" (or no
// tools) the reply is text. "auto" parses whatever calls of the tools the model writes;
// "required" and a named function also Constrain the output by grammar to one call of the
// allowed functions in the model's format, so it cannot answer otherwise.
func (s *Server) toolSetup(ctx context.Context, g *GenParams, req *ChatRequest) (*ToolMode, error) {
	if IsNull(req.Tools) {
		if !IsNull(req.ToolChoice) {
			var choice string
			if json.Unmarshal(req.ToolChoice, &choice) != nil || choice != "none" {
				return nil, BadRequest("tool_choice", "tool_choice needs tools")
			}
		}
		return nil, nil
	}
	tools, err := parseTools(req.Tools, s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	mode := &ToolMode{Format: chat.DetectToolFormat(s.tmpl.Source()), Parallel: req.ParallelToolCalls == nil || *req.ParallelToolCalls}
	choice, name, err := parseToolChoice(req.ToolChoice)
	if err != nil {
		return nil, err
	}
	var allowed []int // indexes in tools
	for i, t := range tools {
		if choice != "required" || name == "" || t.Function.Name == name {
			allowed = append(allowed, i)
			mode.Names = append(mode.Names, t.Function.Name)
		}
	}
	switch choice {
	case "none":
		return nil, nil
	case "auto":
		return mode, nil
	}
	if len(allowed) == 0 {
		return nil, BadRequest("tool_choice", "tool_choice names %s, which is not among the tools", Echo(name))
	}
	if g.sampling.Grammar != nil {
		return nil, BadRequest("tool_choice", "tool_choice %s cannot be combined with another output constraint", Echo(choice))
	}
	release, err := s.compileSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	src, err := toolCallGrammar(ctx, mode.Format, tools, allowed, s.cfg.Limits.Grammar)
	if err != nil {
		return nil, err
	}
	gr, err := s.compileConstraint(ctx, "tools", src)
	if err != nil {
		return nil, err
	}
	if err := s.setGrammar(g, gr); err != nil {
		return nil, err
	}
	mode.Parallel = false
	return mode, nil
}

// parseTools decodes and checks the request's tools: at most lim.MaxTools, each of type
// "function" with a valid name and, if given, a parameters object whose local $refs resolve
// inside it, lim.MaxToolsBytes of parameters in all. Errors are 400s naming the field at fault.
func parseTools(raw json.RawMessage, lim RequestLimits) ([]toolFunction, error) {
	var tools []toolFunction
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, BadRequest("tools", "tools must be a list of {\"type\": \"function\", \"function\": {...}} objects")
	}
	if len(tools) > lim.MaxTools {
		return nil, BadRequest("tools", "%d tools given: at most %d are allowed (--max-tools)", len(tools), lim.MaxTools)
	}
	size := 0
	for i, t := range tools {
		if t.Type != "function" {
			return nil, BadRequest("tools", "tools[%d] must have type \"function\"", i)
		}
		if n := t.Function.Name; !toolName.MatchString(n) {
			shown := strconv.Quote(n)
			if len(n) > 64 { // not echoed back whole: it may be megabytes
				shown = fmt.Sprintf("of %d bytes", len(n))
			}
			return nil, BadRequest(fmt.Sprintf("tools[%d].function.name", i),
				"tools[%d].function.name %s must be 1 to 64 letters, digits, underscores or dashes", i, shown)
		}
		size += len(bytes.TrimSpace(t.Function.Parameters))
		if size > lim.MaxToolsBytes {
			return nil, BadRequest("tools", "the tools' parameters exceed %d bytes in all (--max-tools-bytes)", lim.MaxToolsBytes)
		}
		if err := checkParameters(t.Function.Parameters); err != nil {
			param := fmt.Sprintf("tools[%d].function.parameters", i)
			return nil, BadRequest(param, "%s: %v", param, err)
		}
	}
	return tools, nil
}

// parseToolChoice returns "none", "auto" or "required", and the function name for
// {"type": "function", "function": {"name": ...}} (choice "required").
func parseToolChoice(raw json.RawMessage) (choice, name string, err error) {
	if IsNull(raw) {
		return "auto", "", nil
	}
	if json.Unmarshal(raw, &choice) == nil {
		switch choice {
		case "none", "auto", "required":
			return choice, "", nil
		}
		return "", "", BadRequest("tool_choice", "tool_choice %s: use none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}", Echo(choice))
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != "function" || named.Function.Name == "" {
		return "", "", BadRequest("tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	return "required", named.Function.Name, nil
}

// toolCallGrammar is GBNF for exactly one call of one of the tools at indexes allowed, written
// as format writes it: a JSON object with the function's name and its arguments following the
// function's parameter schema, inside the format's markers. Each tool's parameters are
// converted on their own, so that their $refs ("#" included) resolve inside them and never
// reach the wrapper object or another tool; the rules are then prefixed "tI-" to keep the
// tools' grammars apart. The conversions share lim's time (MaxTime for them all, not each) and
// stop when ctx ends. tools must have passed parseTools. Errors are 400s.
func toolCallGrammar(ctx context.Context, format chat.ToolFormat, tools []toolFunction, allowed []int, lim grammar.Limits) (string, error) {
	argsKey := "arguments"
	if format == chat.ToolLlama3 {
		argsKey = "parameters"
	}
	var sb strings.Builder
	switch format {
	case chat.ToolLlama3:
		sb.WriteString("root ::= tool-call\n")
	case chat.ToolMistral:
		sb.WriteString(`root ::= "[TOOL_CALLS][" tool-call "]"` + "\n")
	case chat.ToolHarmony:
		// An optional thought first (no marker inside it), then the call on the commentary
		// channel, its body the arguments.
		sb.WriteString(`root ::= ( "<|channel|>analysis<|message|>" harmony-text* "<|end|><|start|>assistant" )? "<|channel|>commentary to=functions." tool-call` + "\n")
		sb.WriteString(`harmony-text ::= [^<] | "<" [^|]` + "\n")
	default:
		sb.WriteString(`root ::= "<tool_call>\n" tool-call "\n</tool_call>"` + "\n")
	}
	// The object's spacing is the converter's: one space, or a newline and up to 20 blanks.
	sb.WriteString(`call-space ::= | " " | "\n" [ \t]{0,20}` + "\n")
	branches := make([]string, len(allowed))
	for k, i := range allowed {
		branches[k] = "call-" + strconv.Itoa(i)
	}
	sb.WriteString("tool-call ::= " + strings.Join(branches, " | ") + "\n")
	size := 0
	// One time budget for all the tools, not one per tool (up to MaxTools of them).
	total := lim.MaxTime
	if total <= 0 {
		total = grammar.DefaultMaxTime
	}
	deadline := time.Now().Add(total)
	for _, i := range allowed {
		t := tools[i]
		params := t.Function.Parameters
		if IsNull(params) {
			params = json.RawMessage(`{"type": "object"}`)
		}
		param := fmt.Sprintf("tools[%d].function.parameters", i)
		one := lim
		if one.MaxTime = time.Until(deadline); one.MaxTime <= 0 {
			return "", limitError("tools", grammar.TimeLimit(total, total-one.MaxTime))
		}
		src, err := jsonschema.Convert(ctx, params, one)
		if isLimit(err) {
			return "", limitError("tools", err)
		}
		if err != nil {
			return "", BadRequest(param, "%s cannot be turned into a grammar: %v", param, err)
		}
		if size += len(src); size > maxToolGrammarBytes {
			return "", BadRequest("tools", "the tools' parameters make a grammar of over %d bytes (at %s)", maxToolGrammarBytes, param)
		}
		prefix := "t" + strconv.Itoa(i) + "-"
		rules, err := prefixRules(src, prefix)
		if err != nil {
			return "", InternalError(fmt.Errorf("%s: the schema's grammar: %w", param, err))
		}
		// Names are plain (parseTools), so they go into the literals as they are.
		if format == chat.ToolHarmony {
			fmt.Fprintf(&sb, `call-%d ::= "%s <|constrain|>json<|message|>" %sroot`+"\n", i, t.Function.Name, prefix)
			sb.WriteString(rules)
			continue
		}
		fmt.Fprintf(&sb, `call-%d ::= "{" call-space "\"name\"" call-space ":" call-space "\"%s\"" call-space "," call-space "\"%s\"" call-space ":" call-space %sroot "}" call-space`+"\n",
			i, t.Function.Name, argsKey, prefix)
		sb.WriteString(rules)
	}
	return sb.String(), nil
}

// prefixRules puts prefix before every rule name of GBNF source src, where rules are defined
// and where they are used: every name outside string literals, character classes and {m,n}
// bounds. src must be what jsonschema.Grammar writes (no comments).
func prefixRules(src, prefix string) (string, error) {
	var sb strings.Builder
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '"' || c == '[' || c == '{':
			end := map[byte]byte{'"': '"', '[': ']', '{': '}'}[c]
			j := i + 1
			for ; j < len(src) && src[j] != end; j++ {
				if src[j] == '\\' {
					j++ // the escaped byte, which may be the closing one
				}
			}
			if j >= len(src) {
				return "", fmt.Errorf("unterminated %q at offset %d", c, i)
			}
			sb.WriteString(src[i : j+1])
			i = j + 1
		case isRuleNameByte(c):
			j := i
			for j < len(src) && isRuleNameByte(src[j]) {
				j++
			}
			sb.WriteString(prefix + src[i:j])
			i = j
		default:
			sb.WriteByte(c)
			i++
		}
	}
	return sb.String(), nil
}

// isRuleNameByte reports whether c may appear in a GBNF rule name (as package grammar reads it).
func isRuleNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// Parse splits a whole reply into content and calls. A reply cut by max_tokens (cut) is read
// as a stream reads it, so that a call cut inside its arguments is the call with the arguments
// written so far, as the streamed reply sent it (deltas cannot be taken back) and as OpenAI
// returns a call cut by max_tokens; server/openai then keeps finish_reason "length", which tells
// the client the arguments are incomplete.
func (t *ToolMode) Parse(content string, cut bool) (string, []chat.ToolCall) {
	if !cut {
		return chat.ParseToolCalls(t.Format, content, t.Names)
	}
	p := chat.NewToolParser(t.Format, t.Names)
	p.StreamCalls()
	content = p.Add(content)
	rest, calls := p.Finish()
	return content + rest, calls
}

// ToolReply turns parsed calls into OpenAI's tool_calls; parallel false keeps the first.
func ToolReply(calls []chat.ToolCall, parallel bool, withIndex bool) []ToolCallJSON {
	if !parallel && len(calls) > 1 {
		calls = calls[:1]
	}
	out := make([]ToolCallJSON, len(calls))
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

// Schema keywords whose values hold subschemas, by shape: a subschema, or a list of them (items,
// anyOf, ...), or an object of them by name (properties, $defs, ...). Every other keyword's
// value is data (const, enum, default, examples) or an annotation, where "$ref" means nothing.
var (
	subschemaKeys = map[string]bool{"additionalProperties": true, "items": true, "prefixItems": true,
		"anyOf": true, "oneOf": true, "allOf": true, "not": true, "if": true, "then": true, "else": true,
		"contains": true, "propertyNames": true, "additionalItems": true, "unevaluatedItems": true,
		"unevaluatedProperties": true}
	subschemaMapKeys = map[string]bool{"properties": true, "patternProperties": true, "$defs": true,
		"definitions": true, "dependentSchemas": true}
)

// checkParameters checks a tool's parameters: absent, null or a JSON object whose every $ref is
// a JSON pointer resolving inside that object ("#" being the object itself), so that a
// reference never reaches the wrapper the call grammar puts around it, nor another tool. It
// runs for every tool_choice, as the template shows the schema to the model either way.
func checkParameters(raw json.RawMessage) error {
	if IsNull(raw) {
		return nil
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("not valid JSON: %v", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return errors.New("must be a JSON Schema object")
	}
	return checkRefs(doc, doc, "#")
}

// checkRefs checks the $refs of schema s, found at JSON pointer path of doc, and of its
// subschemas.
func checkRefs(doc, s any, path string) error {
	o, ok := s.(map[string]any)
	if !ok {
		return nil // true, false, or a value the converter will refuse
	}
	if ref, ok := o["$ref"]; ok {
		r, isString := ref.(string)
		if !isString {
			return fmt.Errorf("%s/$ref must be a string", path)
		}
		if err := resolveRef(doc, r); err != nil {
			return fmt.Errorf("%s/$ref %q %v", path, r, err)
		}
	}
	for k, v := range o {
		kp := path + "/" + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
		switch {
		case subschemaKeys[k]:
			list, isList := v.([]any)
			if !isList {
				list = []any{v}
			}
			for j, e := range list {
				p := kp
				if isList {
					p += "/" + strconv.Itoa(j)
				}
				if err := checkRefs(doc, e, p); err != nil {
					return err
				}
			}
		case subschemaMapKeys[k]:
			m, _ := v.(map[string]any)
			for name, e := range m {
				if err := checkRefs(doc, e, kp+"/"+strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// resolveRef follows ref, which must be "#" or a "#/..." JSON pointer, from doc and requires it
// to reach a schema (an object or a boolean).
func resolveRef(doc any, ref string) error {
	if ref != "#" && !strings.HasPrefix(ref, "#/") {
		return errors.New("must be \"#\" or a \"#/...\" pointer inside the tool's parameters")
	}
	target := doc
	if ref != "#" {
		for _, seg := range strings.Split(ref[2:], "/") {
			seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
			switch t := target.(type) {
			case map[string]any:
				next, ok := t[seg]
				if !ok {
					return fmt.Errorf("does not resolve inside the tool's parameters: no %q", seg)
				}
				target = next
			case []any:
				j, err := strconv.Atoi(seg)
				if err != nil || j < 0 || j >= len(t) {
					return fmt.Errorf("does not resolve inside the tool's parameters: no item %q", seg)
				}
				target = t[j]
			default:
				return fmt.Errorf("does not resolve inside the tool's parameters: %q is not inside an object or list", seg)
			}
		}
	}
	switch target.(type) {
	case map[string]any, bool:
		return nil
	}
	return errors.New("does not point at a schema")
}
