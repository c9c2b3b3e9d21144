package tokenizer

import "unicode/utf8"

// encodeBPE appends the byte-level BPE tokenization of text: the pre-tokenizer splits it into
// words, each word's UTF-8 bytes are mapped to GPT-2's byte characters, and the characters are
// merged pairwise in merge-rank order.
func (t *Tokenizer) encodeBPE(text string, out []int32, s *scratch) []int32 {
	s.runes = decodeRunes(text, s.runes[:0])
	s.ends, s.tmp = t.pre.split(s.runes, s.ends, s.tmp)
	start := int32(0)
	for _, end := range s.ends {
		s.word = s.word[:0]
		for _, r := range s.runes[start:end] {
			for _, b := range appendCpt(s.byteBuf(), r) {
				s.word = append(s.word, byteUnicode[b]...)
			}
		}
		start = end
		out = t.encodeWord(string(s.word), out, s)
	}
	return out
}

// byteBuf returns a small buffer for one encoded character.
func (s *scratch) byteBuf() []byte { return s.cpt[:0] }

// encodeWord appends the tokens of one byte-encoded pre-tokenizer word.
func (t *Tokenizer) encodeWord(word string, out []int32, s *scratch) []int32 {
	if t.pre.ignoreMerges {
		if id, ok := t.ids[word]; ok {
			return append(out, id)
		}
	}
	s.splitChars(word)
	s.mergeSymbols(word, func(start, mid, end int32) (float64, bool) {
		rank, ok := t.ranks[mergePair{word[start:mid], word[mid:end]}]
		return -float64(rank), ok
	})
	return s.appendMerged(out, word, t.ids, t.appendByteTexts)
}

// appendByteTexts appends the tokens of piece's single bytes (as texts) that the vocabulary has:
// BPE's fallback for merged text without a token, as llama.cpp's (in a complete byte-level
// vocabulary this never happens).
func (t *Tokenizer) appendByteTexts(out []int32, piece string) []int32 {
	for j := 0; j < len(piece); j++ {
		if id, ok := t.ids[piece[j:j+1]]; ok {
			out = append(out, id)
		}
	}
	return out
}

// decodeRunes appends the code points of text, decoding UTF-8 as llama.cpp does: overlong and
// surrogate encodings are accepted, and each byte that starts no valid sequence becomes U+FFFD.
func decodeRunes(text string, dst []rune) []rune {
	if utf8.ValidString(text) {
		for _, r := range text {
			dst = append(dst, r)
		}
		return dst
	}
	for i := 0; i < len(text); {
		r, n := decodeCpt(text, i)
		dst = append(dst, r)
		i += n
	}
	return dst
}

func decodeCpt(s string, i int) (rune, int) {
	b := s[i]
	cont := func(k int) bool { return i+k < len(s) && s[i+k]&0xC0 == 0x80 }
	switch {
	case b < 0x80:
		return rune(b), 1
	case b&0xE0 == 0xC0 && cont(1):
		return rune(b&0x1F)<<6 | rune(s[i+1]&0x3F), 2
	case b&0xF0 == 0xE0 && cont(1) && cont(2):
		return rune(b&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F), 3
	case b&0xF8 == 0xF0 && cont(1) && cont(2) && cont(3):
		r := rune(b&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F)
		if r <= utf8.MaxRune {
			return r, 4
		}
	}
	return utf8.RuneError, 1
}

// appendCpt appends the UTF-8 encoding of a code point, surrogates included (utf8.AppendRune
// would replace those with U+FFFD).
func appendCpt(dst []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(dst, byte(r))
	case r < 0x800:
		return append(dst, 0xC0|byte(r>>6), 0x80|byte(r)&0x3F)
	case r < 0x10000:
		return append(dst, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	}
	return append(dst, 0xF0|byte(r>>18), 0x80|byte(r>>12)&0x3F, 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
}
