package chat

import (
	"encoding/json"
	"slices"
	"strings"
)

// harmonyCall is one tool call as harmonyCalls reads it.
type harmonyCall struct {
	name    string          // the recipient without "functions."
	raw     strings.Builder // the message as written: header, body, end marker
	body    strings.Builder // the message's body: the arguments as written
	args    strings.Builder // streaming: the body with the blanks outside strings dropped
	sent    int             // bytes of args sent as deltas
	started bool            // the first delta (the name) went out
	lead    bool            // nothing but blanks in the body yet
	stream  bool            // the body opened with "{": its fragments stream as they come
	inStr   bool
	esc     bool
}

// harmonyCalls is ToolParser's reading of harmony (ToolHarmony): messages addressed to a
// function are tool calls, their bodies the arguments; the rest is content as the parser was
// given it (after ReasoningParser, the final answer's text; without it, the model's markup).
// From the first call's header on, everything is held for Finish, as the other formats hold
// from their first marker: a call that does not parse, or that names a function not among
// the offered ones, makes the held text content.
type harmonyCalls struct {
	sc      harmonyScanner
	names   []string
	stream  bool
	holding bool
	content joiner          // what the current Add releases
	held    strings.Builder // the text from the first call's header on, as given
	rest    strings.Builder // the held text that is not a call: content when the calls hold
	calls   []*harmonyCall
	cur     *harmonyCall // the open call
	deltas  []ToolDelta
}

func (h *harmonyCalls) text(raw string) {
	if h.holding {
		h.held.WriteString(raw)
		h.rest.WriteString(raw)
		return
	}
	h.content.add(raw)
}

func (h *harmonyCalls) open(hd harmonyHeader) {
	if !hd.call() {
		h.cur = nil
		h.text(hd.raw)
		return
	}
	h.holding = true
	h.held.WriteString(hd.raw)
	c := &harmonyCall{name: strings.TrimPrefix(hd.recipient, "functions."), lead: true}
	c.raw.WriteString(hd.raw)
	h.calls, h.cur = append(h.calls, c), c
	if h.stream && slices.Contains(h.names, c.name) {
		c.started = true
		h.deltas = append(h.deltas, ToolDelta{Index: len(h.calls) - 1, Name: c.name})
	}
}

func (h *harmonyCalls) body(s string) {
	c := h.cur
	if c == nil {
		h.text(s)
		return
	}
	h.held.WriteString(s)
	c.raw.WriteString(s)
	c.body.WriteString(s)
	if !c.started {
		return
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if c.lead {
			if isBlank(b) {
				continue
			}
			c.lead, c.stream = false, b == '{'
		}
		if !c.stream {
			return
		}
		// The arguments as callJSON.toolCall returns them (json.Compact): blanks outside
		// strings dropped, so that the deltas join into the final arguments.
		switch {
		case c.inStr && c.esc:
			c.esc = false
		case c.inStr && b == '\\':
			c.esc = true
		case b == '"':
			c.inStr = !c.inStr
		case !c.inStr && isBlank(b):
			continue
		}
		c.args.WriteByte(b)
	}
	if a := c.args.String(); len(a) > c.sent {
		h.deltas = append(h.deltas, ToolDelta{Index: len(h.calls) - 1, Arguments: a[c.sent:]})
		c.sent = len(a)
	}
}

func (h *harmonyCalls) close(end string) {
	if h.cur == nil {
		h.text(end)
		return
	}
	h.held.WriteString(end)
	h.cur.raw.WriteString(end)
	h.cur = nil
}

func (h *harmonyCalls) add(s string) string {
	h.sc.feed(s, h)
	return h.content.take()
}

// finish ends the reply: the content not yet returned and the calls. When every call parses
// and names an offered function, the calls and the held text around them; otherwise, with no
// call streamed, the held text as content; with calls streamed, those calls as they were sent
// (a client has them; a call cut by max_tokens is its arguments so far), then the text around
// them and the calls not streamed as written.
func (h *harmonyCalls) finish() (string, []ToolCall) {
	h.sc.finish(h)
	content := h.content.take()
	if !h.holding {
		return content, nil
	}
	calls := make([]ToolCall, 0, len(h.calls))
	ok := true
	for _, c := range h.calls {
		tc, good := callJSON{Name: c.name, Arguments: json.RawMessage(c.body.String())}.toolCall()
		ok = ok && good && slices.Contains(h.names, c.name)
		calls = append(calls, tc)
	}
	streamed := slices.ContainsFunc(h.calls, func(c *harmonyCall) bool { return c.started })
	switch {
	case ok:
		for i, tc := range calls {
			c := h.calls[i]
			if !c.started {
				h.deltas = append(h.deltas, ToolDelta{Index: i, Name: tc.Name})
				c.sent = 0
			}
			// What was streamed is a prefix of the parsed arguments unless they were a
			// string holding the object, which was never streamed.
			if sent := c.args.String()[:c.sent]; strings.HasPrefix(tc.Arguments, sent) && len(tc.Arguments) > len(sent) {
				h.deltas = append(h.deltas, ToolDelta{Index: i, Arguments: tc.Arguments[len(sent):]})
			}
		}
		if !h.stream {
			h.deltas = h.deltas[:0]
		}
		return content + h.rest.String(), calls
	case !streamed:
		return content + h.held.String(), nil
	}
	var out []ToolCall
	var unsent strings.Builder // the calls not streamed, as written: content
	for _, c := range h.calls {
		if !c.started {
			unsent.WriteString(c.raw.String())
			continue
		}
		out = append(out, ToolCall{Name: c.name, Arguments: c.args.String()[:c.sent]})
	}
	return content + h.rest.String() + unsent.String(), out
}

func (h *harmonyCalls) takeDeltas() []ToolDelta {
	d := h.deltas
	h.deltas = h.deltas[:0]
	return d
}
