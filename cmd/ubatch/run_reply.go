package main

import (
	"fmt"
	"io"
	"strings"

	"ubatch/chat"
)

// replyText prints a reply of ubatch run's session as it streams. With a template that teaches
// reasoning (<think>, gpt-oss's harmony channels) the thought is split out as the server splits
// it and printed between "Thinking..." and "...done thinking." as Ollama's run prints it, so
// that neither the markup nor the thought lands in the answer, nor in the history the template
// is given back (gpt-oss's raises on an answer holding channel markup).
type replyText struct {
	out      io.Writer
	parser   *chat.ReasoningParser // nil: the reply is printed as written
	thinking bool                  // "Thinking..." was printed and not yet closed
	answer   strings.Builder
	thought  strings.Builder
}

func newReplyText(out io.Writer, tmpl *chat.Template) *replyText {
	r := &replyText{out: out}
	if tmpl != nil && chat.DetectReasoningFormat(tmpl.Source()) != chat.ReasoningNone {
		r.parser = chat.NewReasoningParser(false)
	}
	return r
}

// add prints the next piece of the reply.
func (r *replyText) add(piece string) {
	if r.parser == nil {
		r.print("", piece)
		return
	}
	r.print(r.parser.Add(piece))
}

// finish prints what the parser held back and closes an open thought.
func (r *replyText) finish() {
	if r.parser != nil {
		r.print(r.parser.Finish())
	}
	if r.thinking {
		fmt.Fprint(r.out, "\n...done thinking.\n\n")
		r.thinking = false
	}
}

func (r *replyText) print(thought, answer string) {
	if thought != "" {
		if !r.thinking && r.thought.Len() == 0 {
			fmt.Fprint(r.out, "Thinking...\n")
			r.thinking = true
		}
		r.thought.WriteString(thought)
		fmt.Fprint(r.out, thought)
	}
	if answer != "" {
		if r.thinking {
			fmt.Fprint(r.out, "\n...done thinking.\n\n")
			r.thinking = false
		}
		r.answer.WriteString(answer)
		fmt.Fprint(r.out, answer)
	}
}

// message is the reply as the history's assistant message: the answer, and the thought as its
// reasoning_content when there was one.
func (r *replyText) message() map[string]any {
	m := map[string]any{"role": "assistant", "content": strings.TrimSpace(r.answer.String())}
	if t := strings.TrimSpace(r.thought.String()); t != "" {
		m["reasoning_content"] = t
	}
	return m
}
