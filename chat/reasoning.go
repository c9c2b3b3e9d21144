package chat

import "strings"

// ReasoningFormat is how a chat template's model writes its reasoning before the answer.
type ReasoningFormat int

const (
	// ReasoningNone: the template shows no reasoning markup; replies are read as plain answers.
	ReasoningNone ReasoningFormat = iota
	// ReasoningThink: <think>...</think> before the answer (Qwen3, QwQ, DeepSeek-R1 and its
	// distills, and many fine-tunes).
	ReasoningThink
	// ReasoningHarmony: gpt-oss's harmony channels, the analysis channel's messages before the
	// final one's (see harmony.go).
	ReasoningHarmony
	// ReasoningGemma4: Gemma 4's <|channel>thought ... <channel|> before the answer, written
	// when the template's enable_thinking put <|think|> in the system turn.
	ReasoningGemma4
)

func (f ReasoningFormat) String() string {
	return [...]string{"none", "think", "harmony", "gemma4"}[f]
}

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
	g4Open     = "<|channel>thought" // Gemma 4's; not harmony's <|channel|>
	g4Close    = "<channel|>"
)

// DetectReasoningFormat picks the reasoning markup a chat template teaches its model, from what
// it renders (as DetectToolFormat does for tool calls): a template that writes <|channel|> is
// gpt-oss's harmony, one that writes <|channel>thought Gemma 4's, one that writes <think> teaches
// think tags.
func DetectReasoningFormat(template string) ReasoningFormat {
	switch {
	case strings.Contains(template, hChannel):
		return ReasoningHarmony
	case strings.Contains(template, g4Open):
		return ReasoningGemma4
	case strings.Contains(template, thinkOpen):
		return ReasoningThink
	}
	return ReasoningNone
}

// PromptOpensThought reports whether a rendered prompt ends inside an opened <think> block (the
// DeepSeek-R1 templates write "<think>\n" after the assistant header), so that the reply starts
// inside the thought and only closes it: llama-server's "thinking forced open".
func PromptOpensThought(prompt string) bool {
	i := strings.LastIndex(prompt, thinkOpen)
	return i >= 0 && strings.TrimSpace(prompt[i+len(thinkOpen):]) == ""
}

type reasoningState uint8

const (
	rsStart   reasoningState = iota // nothing but blanks yet: a <think> may still open the reply
	rsThought                       // inside <think>
	rsAfter                         // just after </think>: blanks before the answer are dropped
	rsContent                       // the answer
)

// ReasoningParser splits a streamed reply into reasoning and content, for ReasoningThink: a
// <think>...</think> block at the start of the reply (after blanks) is reasoning, the rest is
// content; for ReasoningGemma4 the same of a <|channel>thought...<channel|> block. As llama-server does, the reasoning is trimmed of blanks at both ends and the answer
// of blanks at its start; an unclosed thought is reasoning to the end. A reply that opens with a
// harmony header (<|channel|>, <|start|> or to=functions., after blanks) is read as harmony
// instead: the analysis channel is reasoning, the final and commentary channels' text content,
// and tool calls stay in the content as written for ToolParser's ToolHarmony (harmony.go).
// Feeding the whole reply to Add at once, or in pieces of any size, gives the same texts.
type ReasoningParser struct {
	state   reasoningState
	lead    bool          // in the thought, nothing but blanks yet: they are dropped
	pending string        // a suffix held back: blanks and the start of a tag, decided by what follows
	close   string        // the tag that ends the thought: </think>, or Gemma 4's <channel|>
	harmony *harmonySplit // the reply opened with a harmony header
}

// NewReasoningParser makes a parser for one reply. inThought says the prompt opened the thought
// (PromptOpensThought), so that the reply starts as reasoning.
func NewReasoningParser(inThought bool) *ReasoningParser {
	p := &ReasoningParser{close: thinkClose}
	if inThought {
		p.state, p.lead = rsThought, true
	}
	return p
}

// Add takes the next piece of the reply and returns the reasoning and content to send now.
func (p *ReasoningParser) Add(delta string) (reasoning, content string) {
	if p.harmony != nil {
		return p.harmony.add(delta)
	}
	text := delta
	if p.pending != "" {
		text = p.pending + delta
		p.pending = ""
	}
	for text != "" {
		switch p.state {
		case rsStart:
			trimmed := strings.TrimLeft(text, " \t\r\n")
			harmony, maybe := opensHarmony(trimmed)
			switch {
			case strings.HasPrefix(trimmed, thinkOpen):
				p.state, p.lead = rsThought, true
				text = trimmed[len(thinkOpen):]
				continue
			case strings.HasPrefix(trimmed, g4Open):
				p.state, p.lead, p.close = rsThought, true, g4Close
				text = trimmed[len(g4Open):]
				continue
			case harmony:
				p.harmony = &harmonySplit{sc: newHarmonyScanner()}
				return p.harmony.add(trimmed)
			case trimmed == "" || strings.HasPrefix(thinkOpen, trimmed) || strings.HasPrefix(g4Open, trimmed) || maybe:
				p.pending = text
				return reasoning, content
			}
			p.state = rsContent
			return reasoning, content + text
		case rsThought:
			if i := strings.Index(text, p.close); i >= 0 {
				reasoning += p.thought(strings.TrimRight(text[:i], " \t\r\n"))
				p.state, text = rsAfter, text[i+len(p.close):]
				continue
			}
			// Hold back what may begin the closing tag, and the blanks before it: they are
			// the reasoning's if more follows, trimmed if the tag does.
			cut := len(text) - partialSuffix(text, p.close)
			cut = len(strings.TrimRight(text[:cut], " \t\r\n"))
			p.pending = text[cut:]
			return reasoning + p.thought(text[:cut]), content
		case rsAfter:
			if text = strings.TrimLeft(text, " \t\r\n"); text == "" {
				return reasoning, content
			}
			p.state = rsContent
		case rsContent:
			return reasoning, content + text
		}
	}
	return reasoning, content
}

// thought returns s as reasoning to send, dropping the blanks that open the thought.
func (p *ReasoningParser) thought(s string) string {
	if p.lead {
		if s = strings.TrimLeft(s, " \t\r\n"); s != "" {
			p.lead = false
		}
	}
	return s
}

// Finish ends the reply and returns what was held back.
func (p *ReasoningParser) Finish() (reasoning, content string) {
	if p.harmony != nil {
		return p.harmony.finish()
	}
	rest := p.pending
	p.pending = ""
	switch p.state {
	case rsStart:
		return "", rest
	case rsThought:
		return p.thought(strings.TrimRight(rest, " \t\r\n")), ""
	}
	return "", rest
}

// SplitReasoning splits a whole reply (see ReasoningParser).
func SplitReasoning(text string, inThought bool) (reasoning, content string) {
	p := NewReasoningParser(inThought)
	r, c := p.Add(text)
	r2, c2 := p.Finish()
	return r + r2, c + c2
}

// partialSuffix returns the length of the longest proper prefix of marker that text ends with.
func partialSuffix(text, marker string) int {
	for k := min(len(marker)-1, len(text)); k > 0; k-- {
		if strings.HasPrefix(marker, text[len(text)-k:]) {
			return k
		}
	}
	return 0
}
