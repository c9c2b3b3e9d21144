// Package chat renders OpenAI-style chat messages into a model's prompt text
// with the model's Jinja chat template (GGUF metadata key
// tokenizer.chat_template), configured as Hugging Face transformers
// configures Jinja2 for apply_chat_template.
//
// The engine is github.com/ardanlabs/jinja. Where it differs from Jinja2 and
// the difference cannot be repaired from outside it: none prints as "" (not
// "None") and floats print in Go's %g form ("1", not "1.0"); iterating over
// none yields nothing instead of failing; undefined values concatenate as ""
// instead of failing; |safe does not make Markup, so Markup's HTML escaping
// on + never happens; and filters Jinja2 has but chat templates rarely use
// (format, truncate, groupby, wordwrap, ...) are missing.
package chat

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// DefaultTimeout is the render deadline used when Options.Timeout is zero.
// Real chat templates render in well under a millisecond.
const DefaultTimeout = 5 * time.Second

// ErrTimeout is returned (wrapped) when rendering exceeds its deadline.
var ErrTimeout = errors.New("chat: template rendering timed out")

// reserved reports whether Render itself defines the variable name, so that
// Options.Vars may not redefine it (Python would reject the duplicate keyword
// argument too), or whether it is one of the package's internal hooks.
func reserved(name string) bool {
	switch name {
	case "messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token":
		return true
	}
	return strings.HasPrefix(name, "__chat_")
}

// Template is a compiled chat template. It is immutable after Parse and safe
// for concurrent use by several goroutines.
type Template struct {
	src  string
	tmpl *jinja.Template
}

// Parse compiles a chat template. The dialect is Hugging Face's: trim_blocks
// and lstrip_blocks on, {% generation %} renders its body, and Render adds
// raise_exception(msg) (failing with *TemplateError), strftime_now(fmt), a
// sandbox-bounded range() and transformers' tojson (indent, separators,
// sort_keys, ensure_ascii; insertion order kept). A syntax error is returned
// as an error, never a panic.
func Parse(src string) (t *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("chat: parsing template: engine panic: %v", r)
		}
	}()
	tmpl, err := jinja.Compile(instrument(src))
	if err != nil {
		return nil, fmt.Errorf("chat: parsing template: %w", err)
	}
	return &Template{src: src, tmpl: tmpl}, nil
}

// Source returns the template text given to Parse.
func (t *Template) Source() string { return t.src }

// Options are the per-render inputs besides the messages.
type Options struct {
	// BOS and EOS are the model's special token texts, exposed to the
	// template as bos_token and eos_token.
	BOS, EOS string
	// AddGenerationPrompt appends the header that starts the assistant's
	// turn.
	AddGenerationPrompt bool
	// Tools are the tool definitions (OpenAI format), exposed as tools; nil
	// exposes tools as none, as transformers does. Elements may be
	// json.RawMessage to keep the request's key order in tojson output.
	Tools []any
	// Vars are extra template variables (e.g. enable_thinking). They may not
	// redefine messages, tools, documents, add_generation_prompt, bos_token,
	// eos_token or the package's internal __chat_* names; as in Jinja2 they
	// may shadow the global functions.
	Vars map[string]any
	// Now is the clock strftime_now reads; nil means time.Now.
	Now func() time.Time
	// Timeout bounds the render; zero means DefaultTimeout, negative means
	// no deadline.
	Timeout time.Duration
	// MaxSteps bounds the loop iterations plus macro calls; zero means
	// DefaultMaxSteps.
	MaxSteps int
}

// Render renders messages to the prompt text.
//
// Each message is a JSON-decoded OpenAI chat message: role, content (a string,
// null, or a list of parts such as {"type":"text","text":...}), and optional
// name, tool_calls, tool_call_id, reasoning_content and so on; the template
// decides what it uses. An assistant message's reasoning_content is also
// given as thinking, the name gpt-oss's template reads (as llama-server
// does), unless the message has a thinking of its own (see withThinking). Values are converted as JSON data (see toValue): map
// keys are sorted, while json.RawMessage values keep their document order and
// structs their field order. A message that violates the template's rules
// fails with a *TemplateError.
//
// Rendering is bounded: at most maxMacroDepth nested macro calls, at most
// opts.MaxSteps loop iterations plus macro calls, and opts.Timeout. When the
// deadline passes Render returns an error wrapping ErrTimeout at once; the
// render itself, which the engine cannot interrupt, stops at its next loop
// iteration or macro call. Panics inside the engine are returned as errors.
func (t *Template) Render(messages []map[string]any, opts Options) (string, error) {
	if t == nil || t.tmpl == nil {
		return "", errors.New("chat: Render on a nil Template")
	}
	g := &guard{maxSteps: opts.MaxSteps}
	if g.maxSteps <= 0 {
		g.maxSteps = DefaultMaxSteps
	}
	data, err := renderData(messages, opts, g)
	if err != nil {
		return "", err
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout < 0 {
		return t.renderSafely(data)
	}

	type result struct {
		out string
		err error
	}
	// Buffered so that an abandoned render can still deliver and exit.
	done := make(chan result, 1)
	go func() {
		out, err := t.renderSafely(data)
		done <- result{out, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.out, r.err
	case <-timer.C:
		// The render stops at its next loop iteration or macro call.
		g.cancelled.Store(true)
		return "", fmt.Errorf("%w after %v", ErrTimeout, timeout)
	}
}

// renderSafely runs the engine, turning a panic into an error.
func (t *Template) renderSafely(data map[string]jinja.Value) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out = ""
			err = fmt.Errorf("chat: template engine panic: %v", r)
		}
	}()
	out, err = t.tmpl.RenderValues(data)
	if err != nil {
		var te *TemplateError
		if errors.As(err, &te) {
			return "", err
		}
		return "", fmt.Errorf("chat: rendering template: %w", err)
	}
	return out, nil
}

// renderData builds the template's variables from the messages and options.
func renderData(messages []map[string]any, opts Options, g *guard) (map[string]jinja.Value, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	data := globals(now, g)
	for k, v := range opts.Vars {
		if reserved(k) {
			return nil, fmt.Errorf("chat: Vars may not redefine %q", k)
		}
		val, err := toValue(v, 0)
		if err != nil {
			return nil, fmt.Errorf("chat: variable %q: %w", k, err)
		}
		data[k] = val
	}

	msgs := make([]jinja.Value, len(messages))
	for i, m := range messages {
		if m == nil {
			return nil, fmt.Errorf("chat: message %d is null", i)
		}
		v, err := toValue(withThinking(m), 0)
		if err != nil {
			return nil, fmt.Errorf("chat: message %d: %w", i, err)
		}
		msgs[i] = v
	}
	data["messages"] = jinja.NewList(msgs)

	data["tools"] = jinja.None()
	if opts.Tools != nil {
		v, err := toValue(opts.Tools, 0)
		if err != nil {
			return nil, fmt.Errorf("chat: tools: %w", err)
		}
		data["tools"] = v
	}
	data["documents"] = jinja.None()
	data["add_generation_prompt"] = jinja.NewBool(opts.AddGenerationPrompt)
	data["bos_token"] = jinja.NewString(opts.BOS)
	data["eos_token"] = jinja.NewString(opts.EOS)
	return data, nil
}

// withThinking returns m with its reasoning_content also as thinking when m is an assistant
// message that has one and no thinking; m itself is not modified. A message with tool calls and
// text content gets none: gpt-oss's template takes one of the two as the call's analysis and
// raises on both, so the text the client read is kept.
func withThinking(m map[string]any) map[string]any {
	r, ok := m["reasoning_content"]
	if _, has := m["thinking"]; !ok || has || m["role"] != "assistant" {
		return m
	}
	if c, _ := m["content"].(string); c != "" && m["tool_calls"] != nil {
		return m
	}
	m = maps.Clone(m)
	m["thinking"] = r
	return m
}
