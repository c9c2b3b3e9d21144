package server

import (
	"crypto/rand"
	"fmt"
	"maps"

	"ubatch/chat"
)

// Reasoning formats of reasoning_format and serve's --reasoning-format, llama-server's names.
const (
	// ReasoningNone leaves the reasoning in content, as the model wrote it.
	ReasoningNone = "none"
	// ReasoningAuto (the default) splits the reasoning markup the chat template teaches
	// (chat.DetectReasoningFormat): <think>...</think> into reasoning_content, starting inside
	// the thought when the rendered prompt opened it; gpt-oss's harmony analysis channel.
	ReasoningAuto = "auto"
	// ReasoningDeepSeek splits <think>...</think> whatever the template shows, opened by the
	// reply or by the prompt.
	ReasoningDeepSeek = "deepseek"
)

// checkReasoningFormat checks a reasoning format's name ("" is the default, auto).
func checkReasoningFormat(name string) error {
	switch name {
	case "", ReasoningNone, ReasoningAuto, ReasoningDeepSeek:
		return nil
	}
	return fmt.Errorf("reasoning format %q: use %s, %s or %s", name, ReasoningNone, ReasoningAuto, ReasoningDeepSeek)
}

// ReasoningMode is how a chat reply is read for reasoning.
type ReasoningMode struct {
	Split     bool // <think>...</think> goes to reasoning_content
	InThought bool // the prompt opened the thought: the reply starts inside it
}

// ReasoningSetup decides how a chat request's reply is read for reasoning: field is the
// request's reasoning_format (nil: the server's default), prompt the rendered conversation. With
// a grammar the reply is what the grammar writes, so it is not taken to continue a thought the
// prompt opened (a forced tool call or a JSON answer would all be reasoning).
func (s *Server) ReasoningSetup(field *string, prompt string, g *GenParams) (ReasoningMode, error) {
	name := s.cfg.ReasoningFormat
	if field != nil {
		if err := checkReasoningFormat(*field); err != nil {
			return ReasoningMode{}, BadRequest("reasoning_format", "%v", err)
		}
		name = *field
	}
	var m ReasoningMode
	switch name {
	case ReasoningNone:
		return m, nil
	case ReasoningDeepSeek:
		m.Split = true
	default:
		m.Split = chat.DetectReasoningFormat(s.tmpl.Source()) != chat.ReasoningNone
	}
	m.InThought = m.Split && g.sampling.Grammar == nil && chat.PromptOpensThought(prompt)
	return m, nil
}

// ApplyEffort maps an effort (chat's reasoning_effort, the Responses API's reasoning.effort,
// named by field) onto cr's thinking switch, as Ollama's think levels are (thinkSwitch): "none"
// and "minimal" turn thinking off, "low", "medium" and "high" turn it on and pass the level as
// the template's reasoning_effort (what gpt-oss's reads, as vLLM and llama-server hand it). The
// request's own chat_template_kwargs and reasoning_format win over the switch's.
func (s *Server) ApplyEffort(field, effort string, cr *ChatRequest) error {
	var on bool
	switch effort {
	case "none", "minimal":
	case "low", "medium", "high":
		on = true
	default:
		return BadRequest(field, "%s %q: use none, minimal, low, medium or high", field, Echo(effort))
	}
	format, kwargs, err := s.ThinkSwitch(field, on, effort)
	if err != nil {
		return err
	}
	maps.Copy(kwargs, cr.ChatTemplateKwargs)
	cr.ChatTemplateKwargs = kwargs
	if cr.ReasoningFormat == nil {
		cr.ReasoningFormat = format
	}
	return nil
}

// NewCallID is a tool call's id, as OpenAI spells them.
func NewCallID() string { return "call_" + rand.Text()[:24] }

// SplitThought feeds one event's text to a stream's reasoning parser (nil: no split) and returns
// the reasoning and the content it releases, all that it held back once the event is the last.
func SplitThought(p *chat.ReasoningParser, ev SeqEvent) (reasoning, content string) {
	if p == nil {
		return "", ev.Text
	}
	reasoning, content = p.Add(ev.Text)
	if ev.Done {
		r, c := p.Finish()
		reasoning, content = reasoning+r, content+c
	}
	return reasoning, content
}

// ThinkSwitch sets the chat template's thinking switch: off, enable_thinking false and the
// reasoning left in the text (there is none to split); on, enable_thinking true, the reasoning
// split out, and level (when set) as the template's reasoning_effort, which gpt-oss's reads. On
// is a 400 naming field when the template has no thinking markup to switch. gpt-oss's harmony
// has no off: off is its reasoning_effort low, the analysis channel still split out.
func (s *Server) ThinkSwitch(field string, on bool, level string) (*string, map[string]any, error) {
	format := chat.DetectReasoningFormat(s.tmpl.Source())
	if !on && format == chat.ReasoningHarmony {
		// gpt-oss always reasons: off is its least effort, and the channels are still split
		// (left in the text they would put harmony's markup in the answer).
		on, level = true, "low"
	}
	if !on {
		none := ReasoningNone
		return &none, map[string]any{"enable_thinking": false}, nil
	}
	if format == chat.ReasoningNone {
		return nil, nil, BadRequest(field, "model %q does not support thinking: its chat template has no thinking switch", s.cfg.ModelID)
	}
	auto := ReasoningAuto
	kwargs := map[string]any{"enable_thinking": true}
	if level != "" {
		kwargs["reasoning_effort"] = level
	}
	return &auto, kwargs, nil
}
