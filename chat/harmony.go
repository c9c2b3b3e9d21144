package chat

import "strings"

// Harmony is gpt-oss's chat format (OpenAI's "harmony response format"). A reply is a sequence
// of messages, each a header and a body:
//
//	<|channel|>analysis<|message|>thought<|end|>
//	<|start|>assistant<|channel|>final<|message|>answer
//	<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}
//
// The first message's <|start|>assistant is the prompt's. The recipient (to=functions.NAME)
// may also stand in the role part (<|start|>assistant to=functions.NAME<|channel|>commentary
// json<|message|>). The reply's last message ends with <|return|> or <|call|>, which end the
// generation and print nothing; the others with <|end|>. gpt-oss's vocabulary prints <|start|>,
// <|channel|>, <|message|>, <|constrain|> and <|end|> as their text (package tokenizer), so the
// parsers read the markers in the text.
//
// The analysis channel is the model's reasoning, final the answer, commentary without a
// recipient a preamble shown to the user (content, as llama-server reads it), and a message
// with a recipient is a tool call whose body is its arguments.
const (
	hStart   = "<|start|>"
	hChannel = "<|channel|>"
	hMessage = "<|message|>"
	hEnd     = "<|end|>"
	hCall    = "<|call|>"
	hReturn  = "<|return|>"
	// hTo opens a recipient; hCallTo is a function call's, which alone opens a reply that
	// the reasoning parser reads as harmony.
	hTo     = "to="
	hCallTo = "to=functions."
)

// maxHarmonyHeader bounds a header's bytes before its <|message|>: harmony headers are a role,
// a channel, a recipient and a content type. A longer "header" is text, so that a reply that
// only looks like one (it starts with "to=") is held back at most this long.
const maxHarmonyHeader = 256

// hBoundaries are the markers that end a message's body: an end marker, or the start of the
// next message when the model left out <|end|>.
var hBoundaries = [...]string{hEnd, hCall, hReturn, hStart, hChannel}

// harmonyHeader is one message's header.
type harmonyHeader struct {
	raw       string // as written, from its first marker (or "to=") through <|message|>
	channel   string // analysis, commentary, final; "" when it names none
	recipient string // what follows to= (functions.NAME); "" for none
}

// call reports whether the message is addressed to a tool.
func (h harmonyHeader) call() bool { return h.recipient != "" }

// parseHarmonyHeader reads a header's channel (after its last <|channel|>) and recipient
// (a "to=" at its start or after a blank, up to a blank or a marker).
func parseHarmonyHeader(raw string) harmonyHeader {
	h := harmonyHeader{raw: raw}
	s := strings.TrimSuffix(raw, hMessage)
	if i := strings.LastIndex(s, hChannel); i >= 0 {
		rest := s[i+len(hChannel):]
		n := 0
		for n < len(rest) && (rest[n] >= 'a' && rest[n] <= 'z' || rest[n] >= 'A' && rest[n] <= 'Z') {
			n++
		}
		h.channel = rest[:n]
	}
	for off := 0; off < len(s); {
		i := strings.Index(s[off:], hTo)
		if i < 0 {
			break
		}
		i += off
		if i == 0 || isBlank(s[i-1]) || s[i-1] == '>' {
			rest := s[i+len(hTo):]
			if n := strings.IndexAny(rest, " \t\r\n<"); n >= 0 {
				rest = rest[:n]
			}
			h.recipient = rest
			break
		}
		off = i + len(hTo)
	}
	return h
}

// harmonySink receives what a harmonyScanner reads. Joined in order, the texts it is given
// (text, each header's raw, body, close's end) are the scanned text exactly.
type harmonySink interface {
	text(raw string)      // text outside any message, as written
	open(h harmonyHeader) // a message's header is complete
	body(s string)        // the next piece of the open message's body
	close(end string)     // the open message ended, at end (its marker) or at the next header ("")
}

type harmonyState uint8

const (
	hsText   harmonyState = iota // outside a message
	hsHeader                     // in a header, before its <|message|>
	hsBody                       // in a message's body
)

// harmonyScanner splits harmony text into messages as it arrives, in pieces of any size:
// markers split across pieces are held back until they are whole. It is the one reader of the
// format, behind both ReasoningParser (its harmony mode) and ToolParser (ToolHarmony).
type harmonyScanner struct {
	st      harmonyState
	lead    bool   // nothing but blanks read yet: a header may open with "to=" (recipient in role)
	pending string // in hsText and hsBody: a suffix that may begin a marker
	hdr     string // in hsHeader: the header so far
}

func newHarmonyScanner() harmonyScanner { return harmonyScanner{lead: true} }

// harmonyChunk is the most feed reads in one step: a header that does not end re-reads its
// bytes after its first, and in chunks that re-reading stays within a header's length and a
// chunk's, whatever the size of the pieces fed.
const harmonyChunk = 512

// feed reads the next piece of text.
func (sc *harmonyScanner) feed(s string, out harmonySink) {
	for len(s) > harmonyChunk {
		sc.feedChunk(s[:harmonyChunk], out)
		s = s[harmonyChunk:]
	}
	sc.feedChunk(s, out)
}

func (sc *harmonyScanner) feedChunk(s string, out harmonySink) {
	text := s
	if sc.pending != "" {
		text, sc.pending = sc.pending+s, ""
	}
	for text != "" {
		switch sc.st {
		case hsText:
			if sc.lead {
				trimmed := strings.TrimLeft(text, " \t\r\n")
				switch {
				case trimmed == "" || len(trimmed) < len(hTo) && strings.HasPrefix(hTo, trimmed):
					sc.pending = text
					return
				case strings.HasPrefix(trimmed, hTo):
					out.text(text[:len(text)-len(trimmed)])
					sc.lead, sc.st, text = false, hsHeader, trimmed
					continue
				}
				sc.lead = false
			}
			if strings.IndexByte(text, '<') < 0 {
				out.text(text) // no marker, nor the start of one
				return
			}
			i, _ := firstMarker(text, hStart, hChannel)
			if i >= 0 {
				out.text(text[:i])
				sc.st, text = hsHeader, text[i:]
				continue
			}
			k := max(partialSuffix(text, hStart), partialSuffix(text, hChannel))
			out.text(text[:len(text)-k])
			sc.pending = text[len(text)-k:]
			return
		case hsHeader:
			sc.hdr += text
			text = ""
			i := strings.Index(sc.hdr, hMessage)
			switch {
			case i >= 0 && i <= maxHarmonyHeader:
				raw, rest := sc.hdr[:i+len(hMessage)], sc.hdr[i+len(hMessage):]
				sc.hdr, sc.st, text = "", hsBody, rest
				out.open(parseHarmonyHeader(raw))
			case i > maxHarmonyHeader || len(sc.hdr) > maxHarmonyHeader+len(hMessage):
				// Not a header: its first byte is text, and the rest is read again for a
				// marker that opens a real one.
				out.text(sc.hdr[:1])
				sc.st, text, sc.hdr = hsText, sc.hdr[1:], ""
			}
		case hsBody:
			if strings.IndexByte(text, '<') < 0 {
				out.body(text)
				return
			}
			i, m := firstMarker(text, hBoundaries[:]...)
			if i < 0 {
				k := 0
				for _, m := range hBoundaries {
					k = max(k, partialSuffix(text, m))
				}
				out.body(text[:len(text)-k])
				sc.pending = text[len(text)-k:]
				return
			}
			out.body(text[:i])
			if m == hStart || m == hChannel {
				out.close("")
				sc.st, text = hsHeader, text[i:]
				continue
			}
			out.close(m)
			sc.st, text = hsText, text[i+len(m):]
		}
	}
}

// finish ends the text: a header never completed is text as written, an open message ends.
func (sc *harmonyScanner) finish(out harmonySink) {
	switch sc.st {
	case hsText:
		out.text(sc.pending)
	case hsHeader:
		out.text(sc.hdr)
	case hsBody:
		out.body(sc.pending)
		out.close("")
	}
	*sc = harmonyScanner{}
}

// firstMarker returns where the earliest of markers starts in text, and which; -1 for none.
func firstMarker(text string, markers ...string) (int, string) {
	best, which := -1, ""
	for _, m := range markers {
		if i := strings.Index(text, m); i >= 0 && (best < 0 || i < best) {
			best, which = i, m
		}
	}
	return best, which
}

// opensHarmony reports whether a reply (its blanks trimmed) opens with a harmony header, and,
// when it does not, whether it may still (it is a prefix of one of the openings).
func opensHarmony(trimmed string) (opens, maybe bool) {
	for _, m := range [...]string{hChannel, hStart, hCallTo} {
		if strings.HasPrefix(trimmed, m) {
			return true, false
		}
		if strings.HasPrefix(m, trimmed) {
			maybe = true
		}
	}
	return false, maybe
}

// joiner gathers what one Add releases: one piece is returned as it is (a substring of the
// text fed, no allocation, the common case of a token inside a message); several are joined in
// a buffer kept from one Add to the next.
type joiner struct {
	one  string
	buf  []byte
	many bool
}

func (j *joiner) add(s string) {
	switch {
	case s == "":
	case !j.many && j.one == "":
		j.one = s
	case !j.many:
		j.buf = append(append(j.buf[:0], j.one...), s...)
		j.many = true
	default:
		j.buf = append(j.buf, s...)
	}
}

// take returns what was gathered and starts again.
func (j *joiner) take() string {
	out := j.one
	if j.many {
		out = string(j.buf)
	}
	j.one, j.many = "", false
	return out
}

type harmonyMode uint8

const (
	hmReason  harmonyMode = iota // an analysis message: its body is reasoning
	hmContent                    // final, or a commentary preamble: its body is content
	hmRaw                        // a tool call or an unknown message: content as written
)

// harmonySplit is ReasoningParser's harmony mode: analysis bodies are reasoning; final and
// commentary bodies are content without their markup; a tool call and a message it cannot
// place stay in the content as written, for ToolParser (ToolHarmony) to read.
type harmonySplit struct {
	sc                 harmonyScanner
	mode               harmonyMode
	reasoning, content joiner // what the current Add or Finish releases
}

func (h *harmonySplit) text(raw string) { h.content.add(raw) }

func (h *harmonySplit) open(hd harmonyHeader) {
	switch {
	case hd.call():
		h.mode = hmRaw
	case hd.channel == "analysis":
		h.mode = hmReason
		return
	case hd.channel == "final" || hd.channel == "commentary":
		h.mode = hmContent
		return
	default:
		h.mode = hmRaw
	}
	h.content.add(hd.raw)
}

func (h *harmonySplit) body(s string) {
	if h.mode == hmReason {
		h.reasoning.add(s)
		return
	}
	h.content.add(s)
}

func (h *harmonySplit) close(end string) {
	if h.mode == hmRaw {
		h.content.add(end)
	}
}

func (h *harmonySplit) add(s string) (reasoning, content string) {
	h.sc.feed(s, h)
	return h.reasoning.take(), h.content.take()
}

func (h *harmonySplit) finish() (reasoning, content string) {
	h.sc.finish(h)
	return h.reasoning.take(), h.content.take()
}
