package server

import (
	"strings"

	"ubatch/sample"
	"ubatch/tokenizer"
)

// GenToken is one generated token as reported to clients, with where its text starts in the
// completion (byte offset).
type GenToken struct {
	ID      int32
	Logprob float32
	Top     []sample.TokenLogProb
	offset  int // start of the token's text in the completion, in bytes
	end     int // end of its text
}

// Offset is where the token's text starts in the completion, in bytes.
func (t GenToken) Offset() int { return t.offset }

// textStream turns generated tokens into text that is safe to send: it decodes through the
// tokenizer's streaming decoder (so UTF-8 characters are never split), holds back text that may
// be the beginning of a stop string, and cuts the text at the first stop string.
//
// Tokens are released together with the text they produced, so that log-probabilities sent with a
// chunk describe exactly the tokens whose text the chunk carries.
type textStream struct {
	dec      *tokenizer.Stream
	stop     []string
	held     string     // decoded text not yet released
	released int        // bytes released so far
	pending  []GenToken // tokens whose text is not fully released
	done     bool
	// minTokens is the request's min_tokens: as in vLLM, stop strings do not end the text
	// before that many tokens were added (the sampler holds the end tokens back as long).
	minTokens, added int
}

func newTextStream(vocab *tokenizer.Tokenizer, stop []string) *textStream {
	return &textStream{dec: vocab.NewStream(), stop: stop}
}

// add decodes one token. It returns the text that can be sent now, the tokens it completes, and,
// when a stop string matched, that string (the text is then cut before it and the stream is done).
func (t *textStream) add(tok GenToken) (text string, toks []GenToken, stopWord string) {
	piece := t.dec.Add(tok.ID)
	t.added++
	produced := t.released + len(t.held)
	tok.offset, tok.end = produced, produced+len(piece)
	t.pending = append(t.pending, tok)
	t.held += piece
	return t.release(false)
}

// flush ends the stream: it decodes any incomplete trailing bytes and releases everything that is
// not cut by a stop string.
func (t *textStream) flush() (text string, toks []GenToken, stopWord string) {
	if t.done {
		return "", nil, ""
	}
	t.held += t.dec.Flush()
	return t.release(true)
}

func (t *textStream) release(final bool) (string, []GenToken, string) {
	if t.done {
		return "", nil, ""
	}
	early := t.added < t.minTokens // stop strings do not count yet
	if i, word := t.firstStop(); i >= 0 && !early {
		cut := t.released + i
		text := t.held[:i]
		t.held, t.released, t.done = "", cut, true
		// Tokens that begin before the cut contributed text; the stop string's own tokens did not.
		n := 0
		for n < len(t.pending) && t.pending[n].offset < cut {
			n++
		}
		toks := t.pending[:n:n]
		t.pending = nil
		return text, toks, word
	}
	keep := 0
	if !final && !early {
		keep = t.stopPrefixLen()
	}
	text := t.held[:len(t.held)-keep]
	t.held = t.held[len(t.held)-keep:]
	t.released += len(text)
	n := 0
	for n < len(t.pending) && (final || t.pending[n].end <= t.released) {
		n++
	}
	toks := t.pending[:n:n]
	t.pending = t.pending[n:]
	if final {
		t.done = true
	}
	return text, toks, ""
}

// firstStop returns the position in held of the earliest stop string and that string, or -1.
// At equal positions the longer string wins, so that the longest match is cut.
func (t *textStream) firstStop() (int, string) {
	best, word := -1, ""
	for _, s := range t.stop {
		i := strings.Index(t.held, s)
		if i >= 0 && (best < 0 || i < best || i == best && len(s) > len(word)) {
			best, word = i, s
		}
	}
	return best, word
}

// stopPrefixLen returns the length of the longest suffix of held that is a proper prefix of a stop
// string: text that a later token may turn into a match, so it must not be sent yet.
func (t *textStream) stopPrefixLen() int {
	keep := 0
	for _, s := range t.stop {
		for k := min(len(s)-1, len(t.held)); k > keep; k-- {
			if strings.HasSuffix(t.held, s[:k]) {
				keep = k
				break
			}
		}
	}
	return keep
}
