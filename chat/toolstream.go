package chat

import (
	"encoding/json"
	"slices"
	"strings"
)

// ToolDelta is one step of a streamed tool call. A call's first delta names its function (Name
// set, Arguments ""); the next ones carry fragments of its arguments' JSON text, in order, so
// that joined they are the call's final Arguments exactly.
type ToolDelta struct {
	Index     int
	Name      string
	Arguments string
}

// scanState is where callStream is in the format's markup or in a call's JSON.
type scanState uint8

const (
	scLead        scanState = iota // before a call: blanks and the format's marker
	scLit                          // matching lit (from litPos), then ret
	scObj                          // blanks, then the call's "{"
	scKey                          // blanks, then a key's opening quote or the object's "}"
	scKeyStr                       // inside a key
	scColon                        // blanks, then ":"
	scValue                        // blanks, then a value
	scValBody                      // inside a value (string, container or scalar)
	scNameStr                      // inside the "name" value
	scAfterVal                     // blanks, then "," or the object's "}"
	scAfterCall                    // the format's markup after a call
	scMistralHead                  // after [TOOL_CALLS]: a list or a bare name
	scMistralName                  // a bare Mistral name, up to [ARGS]
	scListSep                      // in a Mistral list: "," or "]"
	scStopped                      // the text is not (or no longer) streamable: Finish decides
)

// streamCall is one call as callStream reads it.
type streamCall struct {
	name     strings.Builder
	args     strings.Builder // the arguments' JSON with the blanks outside strings dropped
	sent     int             // bytes of args sent as deltas
	named    bool            // the name is complete
	started  bool            // the first delta (the name) went out
	asString bool            // the arguments are a JSON string holding the object: sent at the end
	complete bool            // the call's JSON (and a Mistral bare call's arguments) ended
	end      int             // offset in the held text after the call's markup
}

// callStream reads the held text of a ToolParser as it arrives, byte by byte, and turns calls of
// offered functions into deltas once their name is complete: a call of another function, or
// text it cannot follow, stops it, and Finish's whole parse decides what that text is. What it
// sends is the arguments' text with the blanks outside strings dropped, which is what
// callJSON.toolCall returns (json.Compact), so that the whole parse extends what was streamed.
type callStream struct {
	f      ToolFormat
	names  []string
	st     scanState
	ret    scanState // the state after the literal (scLit) or the value (scValBody)
	lit    string
	litPos int
	off    int // bytes of the held text read

	key               [12]byte // the current key, up to its first 12 bytes
	keyLen            int
	isArgs, nameValue bool // the value being read is the arguments, or the name
	depth             int  // value nesting
	inStr, esc        bool
	scalar            bool
	seenArgs, seenNm  bool // the current object had its arguments, its name
	inList            bool // inside a Mistral JSON list of calls

	calls  []*streamCall
	deltas []ToolDelta // not yet taken
}

func isBlank(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

func isNameByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-'
}

// feed reads the next piece of the held text and queues the deltas it completes.
func (s *callStream) feed(text string) {
	for i := 0; i < len(text) && s.st != scStopped; i++ {
		s.off++
		for !s.step(text[i]) && s.st != scStopped {
			// step asked for the byte again, in the state it moved to
		}
	}
	s.flush()
}

// literal starts matching lit, whose first byte was just read.
func (s *callStream) literal(lit string, ret scanState) bool {
	s.st, s.lit, s.litPos, s.ret = scLit, lit, 1, ret
	return true
}

// begin starts a call.
func (s *callStream) begin() {
	s.calls = append(s.calls, &streamCall{})
	s.seenArgs, s.seenNm = false, false
}

func (s *callStream) cur() *streamCall { return s.calls[len(s.calls)-1] }

// step reads byte b; false means b is to be read again in the new state.
func (s *callStream) step(b byte) bool {
	switch s.st {
	case scLead:
		switch {
		case isBlank(b):
		case s.f == ToolHermes && b == '<':
			return s.literal("<tool_call>", scObj)
		case s.f == ToolMistral && b == '[':
			return s.literal("[TOOL_CALLS]", scMistralHead)
		case s.f == ToolLlama3 && b == '<' && len(s.calls) == 0:
			return s.literal("<|python_tag|>", scObj)
		case s.f == ToolLlama3 && b == '{':
			s.st = scObj
			return false
		default:
			s.st = scStopped
		}
	case scLit:
		if b != s.lit[s.litPos] {
			s.st = scStopped
			return true
		}
		if s.litPos++; s.litPos == len(s.lit) {
			s.st = s.ret
			if s.lit == "</tool_call>" {
				s.cur().end = s.off
			}
		}
	case scObj:
		switch {
		case isBlank(b):
		case b == '{':
			s.begin()
			s.st = scKey
		default:
			s.st = scStopped
		}
	case scKey:
		switch {
		case isBlank(b):
		case b == '"':
			s.st, s.keyLen = scKeyStr, 0
		case b == '}':
			s.endCall()
		default:
			s.st = scStopped
		}
	case scKeyStr:
		if b == '"' {
			s.st = scColon
		} else if s.keyLen < len(s.key) {
			s.key[s.keyLen] = b
			s.keyLen++
		} else {
			s.keyLen = len(s.key) + 1 // longer than any key read here
		}
	case scColon:
		return s.colonByte(b)
	case scValue:
		return s.valueStart(b)
	case scNameStr:
		return s.nameByte(b)
	case scValBody:
		return s.valueByte(b)
	case scAfterVal:
		switch {
		case isBlank(b):
		case b == ',':
			s.st = scKey
		case b == '}':
			s.endCall()
		default:
			s.st = scStopped
		}
	case scAfterCall:
		return s.afterCall(b)
	case scMistralHead, scMistralName:
		return s.mistralByte(b)
	case scListSep:
		switch {
		case isBlank(b):
		case b == ',':
			s.st = scObj
		case b == ']':
			s.inList, s.st = false, scLead
		default:
			s.st = scStopped
		}
	}
	return true
}

// nameByte reads a byte of the function name's string: a call may only name an offered
// function, in the characters a tool name may have.
func (s *callStream) nameByte(b byte) bool {
	c := s.cur()
	switch {
	case b == '"':
		c.named = true
		s.st = scAfterVal
		if !slices.Contains(s.names, c.name.String()) {
			s.st = scStopped // not offered: the whole parse makes it content
		}
	case isNameByte(b) && c.name.Len() < 64:
		c.name.WriteByte(b)
	default:
		s.st = scStopped // not a name a client may have offered
	}
	return true
}

// colonByte reads the byte after a key (blanks, then the colon) and notes which key it was:
// the call's name, its arguments, or another one.
func (s *callStream) colonByte(b byte) bool {
	switch {
	case isBlank(b):
	case b == ':':
		s.st = scValue
		k := string(s.key[:min(s.keyLen, len(s.key))])
		if s.keyLen > len(s.key) {
			k = ""
		}
		s.isArgs, s.nameValue = k == "arguments" || k == "parameters", k == "name"
		// A second name or second arguments: the whole parse decides which counts.
		if s.isArgs && s.seenArgs || s.nameValue && s.seenNm {
			s.st = scStopped
		}
		s.seenArgs, s.seenNm = s.seenArgs || s.isArgs, s.seenNm || s.nameValue
	default:
		s.st = scStopped
	}
	return true
}

// mistralByte reads Mistral's call heads: "[TOOL_CALLS]" followed by a JSON list, or by
// name[ARGS]{...} (the newer form).
func (s *callStream) mistralByte(b byte) bool {
	switch s.st {
	case scMistralHead:
		switch {
		case isBlank(b):
		case b == '[':
			s.inList, s.st = true, scObj
		case isNameByte(b):
			s.begin()
			s.st = scMistralName
			return false
		default:
			s.st = scStopped
		}
	case scMistralName:
		c := s.cur()
		switch {
		case isNameByte(b) && c.name.Len() < 64:
			c.name.WriteByte(b)
		case b == '[':
			c.named = true
			if !slices.Contains(s.names, c.name.String()) {
				s.st = scStopped
				return true
			}
			s.isArgs, s.nameValue = true, false
			return s.literal("[ARGS]", scValue)
		default:
			s.st = scStopped
		}
	}
	return true
}

// valueStart reads the first byte of a value (blanks before it skipped).
func (s *callStream) valueStart(b byte) bool {
	if isBlank(b) {
		return true
	}
	c := s.cur()
	switch {
	case s.nameValue && b == '"':
		s.st = scNameStr
		return true
	case s.nameValue:
		s.st = scStopped
		return true
	case s.isArgs && b == '"':
		c.asString = true
	}
	s.st, s.depth, s.inStr, s.esc, s.scalar = scValBody, 0, false, false, false
	// A Mistral bare call's arguments end the call; a key's value returns to its object.
	s.ret = scAfterVal
	if c.named && !s.seenNm && s.f == ToolMistral && !s.inList {
		s.ret = scAfterCall
	}
	switch b {
	case '{', '[':
		s.depth = 1
	case '"':
		s.inStr = true
	default:
		s.scalar = true
	}
	s.record(b)
	return true
}

// valueByte reads a byte inside a value, recording the arguments' bytes but blanks outside
// strings.
func (s *callStream) valueByte(b byte) bool {
	switch {
	case s.inStr:
		s.record(b)
		switch {
		case s.esc:
			s.esc = false
		case b == '\\':
			s.esc = true
		case b == '"':
			s.inStr = false
			if s.depth == 0 {
				s.endValue()
			}
		}
	case s.scalar:
		if isBlank(b) || b == ',' || b == '}' || b == ']' {
			s.endValue()
			return false
		}
		s.record(b)
	case isBlank(b):
	default:
		s.record(b)
		switch b {
		case '"':
			s.inStr = true
		case '{', '[':
			s.depth++
		case '}', ']':
			if s.depth--; s.depth == 0 {
				s.endValue()
			}
		}
	}
	return true
}

func (s *callStream) record(b byte) {
	if c := s.cur(); s.isArgs {
		c.args.WriteByte(b)
	}
}

func (s *callStream) endValue() {
	s.st = s.ret
	if s.ret == scAfterCall { // a Mistral bare call ends with its arguments
		s.cur().complete, s.cur().end = true, s.off
	}
}

// endCall ends the current call's object.
func (s *callStream) endCall() {
	c := s.cur()
	c.complete, c.end = true, s.off
	if !c.named {
		s.st = scStopped // a call without a name is not one
		return
	}
	s.st = scAfterCall
	if s.inList {
		s.st = scListSep
	}
}

// afterCall reads the format's markup between calls.
func (s *callStream) afterCall(b byte) bool {
	switch {
	case isBlank(b):
	case s.f == ToolHermes && b == '<':
		return s.literal("</tool_call>", scLead)
	case s.f == ToolLlama3 && b == ';':
	case s.f == ToolLlama3 && b == '{':
		s.st = scObj
		return false
	case s.f == ToolMistral && b == '[':
		return s.literal("[TOOL_CALLS]", scMistralHead)
	default:
		s.st = scStopped
	}
	return true
}

// flush queues the deltas of the calls read so far: a named call's first delta, then what its
// arguments gained.
func (s *callStream) flush() {
	for i, c := range s.calls {
		if !c.named || !slices.Contains(s.names, c.name.String()) {
			return // nothing after a call that cannot be streamed goes out before Finish
		}
		if !c.started {
			c.started = true
			s.deltas = append(s.deltas, ToolDelta{Index: i, Name: c.name.String()})
		}
		// Arguments written as a string are unquoted at the end: their text is not the object's.
		if args := c.args.String(); len(args) > c.sent && !c.asString {
			s.deltas = append(s.deltas, ToolDelta{Index: i, Arguments: args[c.sent:]})
			c.sent = len(args)
		}
	}
}

// started is the number of calls whose first delta went out.
func (s *callStream) started() int {
	n := 0
	for _, c := range s.calls {
		if c.started {
			n++
		}
	}
	return n
}

// settle ends the stream with the whole parse of the held text: calls and ok as parseHermes
// and its kin return them, ok false also when a call names a function not offered. When the
// parse holds, what was streamed is a prefix of each call and the rest goes out; otherwise the
// calls streamed stand as streamed (a client has them already), and the text after the last
// complete one is content. It returns that content and the calls the client was sent.
func (s *callStream) settle(held string, calls []ToolCall, ok bool) (string, []ToolCall) {
	if ok {
		for i, call := range calls {
			if i >= len(s.calls) || !s.calls[i].started {
				s.deltas = append(s.deltas, ToolDelta{Index: i, Name: call.Name})
				s.deltas = append(s.deltas, ToolDelta{Index: i, Arguments: call.Arguments})
				continue
			}
			if sent := s.calls[i].args.String()[:s.calls[i].sent]; strings.HasPrefix(call.Arguments, sent) && len(call.Arguments) > len(sent) {
				s.deltas = append(s.deltas, ToolDelta{Index: i, Arguments: call.Arguments[len(sent):]})
			}
		}
		return "", calls
	}
	var out []ToolCall
	content, last := "", (*streamCall)(nil)
	for i, c := range s.calls {
		if !c.started {
			break
		}
		last = c
		args := c.args.String()[:c.sent]
		if c.asString {
			// Held back until now: this call's own text decides, the whole parse having
			// failed elsewhere.
			if tc, ok := (callJSON{Name: c.name.String(), Arguments: json.RawMessage(c.args.String())}).toolCall(); ok && c.complete {
				args = tc.Arguments
				s.deltas = append(s.deltas, ToolDelta{Index: i, Arguments: args})
			}
		}
		out = append(out, ToolCall{Name: c.name.String(), Arguments: args})
	}
	if last != nil && last.complete {
		content = held[last.end:]
	}
	return content, out
}
