package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteUnicode is GPT-2's bytes_to_unicode table: printable Latin-1 bytes stand for themselves,
// the other 68 bytes map in order to U+0100 onwards, so every byte has a visible character.
var byteUnicode, unicodeByte = buildByteUnicode()

// unicodeByte[r] is the byte that character r stands for, or -1; every mapped character is
// below U+0144.
func buildByteUnicode() (enc [256]string, dec [0x144]int16) {
	for i := range dec {
		dec[i] = -1
	}
	next := rune(256)
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = next
			next++
		}
		enc[b] = string(r)
		dec[r] = int16(b)
	}
	return enc, dec
}

// spaceEscape is SentencePiece's stand-in for a space (U+2581).
const spaceEscape = "\u2581"

// buildPieces precomputes every token's decoded bytes, so that Piece and Decode only copy.
func (t *Tokenizer) buildPieces() {
	t.pieceOff = make([]int32, len(t.tokens)+1)
	for id, text := range t.tokens {
		a := t.attrs[id]
		switch {
		case a&(attrControl|attrUnknown) != 0:
			// special tokens decode to nothing
		case a&attrUserDefined != 0:
			t.pieceBuf = append(t.pieceBuf, text...)
		case a&attrNormal != 0:
			if t.spm {
				t.pieceBuf = append(t.pieceBuf, strings.ReplaceAll(text, spaceEscape, " ")...)
			} else {
				t.pieceBuf = appendByteDecoded(t.pieceBuf, text)
			}
		case a&attrByte != 0:
			if b, ok := parseByteToken(text); ok {
				t.pieceBuf = append(t.pieceBuf, b)
			}
		}
		t.pieceOff[id+1] = int32(len(t.pieceBuf))
	}
}

// appendByteDecoded reverses the GPT-2 byte-to-unicode mapping. A character outside the mapping
// is kept as its own UTF-8 (llama.cpp writes an "[UNK_BYTE_…]" marker instead).
func appendByteDecoded(dst []byte, text string) []byte {
	for _, r := range text {
		if r < rune(len(unicodeByte)) && unicodeByte[r] >= 0 {
			dst = append(dst, byte(unicodeByte[r]))
		} else {
			dst = utf8.AppendRune(dst, r)
		}
	}
	return dst
}

// parseByteToken parses "<0xNN>".
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(s[3])
	lo, ok2 := hexVal(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Piece returns the bytes token id stands for: SPM "▁" becomes a space, <0xNN> byte tokens
// become that byte, BPE text is mapped back through the byte-to-unicode table, user-defined
// tokens are their text, and control or unknown tokens (and out-of-range ids) are empty. The
// slice is shared: do not modify it.
func (t *Tokenizer) Piece(id int32) []byte {
	if id < 0 || int(id) >= len(t.tokens) {
		return nil
	}
	return t.pieceBuf[t.pieceOff[id]:t.pieceOff[id+1]:t.pieceOff[id+1]]
}

// Decode concatenates the pieces of ids. As llama.cpp's detokenizer does for vocabularies that
// add a space prefix (SPM), one leading space of the first token is dropped, so that
// Decode(Encode(s, false, false)) == s; a leading BOS is that first token, so the space after it
// stays (Decode(Encode("Hi", true, false)) == " Hi"), again as in llama.cpp. Unlike llama.cpp it
// does not "clean up" spaces before punctuation, so that Decode agrees with the streaming
// decoder. Control tokens and out-of-range ids decode to nothing.
func (t *Tokenizer) Decode(ids []int32) string {
	size := 0
	for _, id := range ids {
		size += len(t.Piece(id))
	}
	var sb strings.Builder
	sb.Grow(size)
	for i, id := range ids {
		p := t.Piece(id)
		if i == 0 && t.addSP && len(p) > 0 && p[0] == ' ' {
			p = p[1:]
		}
		sb.Write(p)
	}
	return sb.String()
}

// Stream decodes tokens one at a time, as a generation produces them. It returns only complete
// UTF-8: the first bytes of a character split across tokens (e.g. SPM byte tokens) are held back
// until the token that completes it arrives. Unlike Decode it keeps every leading space. A
// Stream is not safe for concurrent use.
type Stream struct {
	t       *Tokenizer
	pending []byte
}

// NewStream returns a streaming decoder.
func (t *Tokenizer) NewStream() *Stream { return &Stream{t: t} }

// Add decodes id and returns the text that is complete so far (possibly "").
func (s *Stream) Add(id int32) string {
	s.pending = append(s.pending, s.t.Piece(id)...)
	n := completeUTF8(s.pending)
	if n == 0 {
		return ""
	}
	out := string(s.pending[:n])
	s.pending = s.pending[:copy(s.pending, s.pending[n:])]
	return out
}

// Flush returns any held-back bytes (an incomplete character) and resets the stream.
func (s *Stream) Flush() string {
	out := string(s.pending)
	s.pending = s.pending[:0]
	return out
}

// completeUTF8 returns the length of the longest prefix of p that does not end inside a
// character: only a valid but incomplete trailing sequence is held back; invalid bytes pass.
func completeUTF8(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		b := p[i]
		if b < 0x80 {
			return len(p)
		}
		if b >= 0xC0 {
			if !utf8.FullRune(p[i:]) {
				return i
			}
			return len(p)
		}
	}
	return len(p)
}
