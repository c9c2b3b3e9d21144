package tokenizer

import "strings"

// encodeSPM appends the SentencePiece tokenization of text (spaces already escaped as "▁"):
// characters are merged pairwise, always taking the adjacent pair whose merged text is the
// highest-scoring token; characters no token covers fall back to <0xNN> byte tokens.
func (t *Tokenizer) encodeSPM(text string, out []int32, s *scratch) []int32 {
	s.splitChars(text)
	s.mergeSymbols(text, func(start, _, end int32) (float64, bool) {
		id, ok := t.ids[text[start:end]]
		if !ok {
			return 0, false
		}
		return float64(t.scores[id]), true
	})
	return s.appendMerged(out, text, t.ids, t.appendBytes)
}

// appendBytes appends the <0xNN> byte tokens of piece.
func (t *Tokenizer) appendBytes(out []int32, piece string) []int32 {
	for j := 0; j < len(piece); j++ {
		out = t.appendByte(out, piece[j])
	}
	return out
}

// appendByte appends the byte token for b. A vocabulary without one maps the byte to UNK, or
// drops it when there is no UNK either (llama.cpp would abort).
func (t *Tokenizer) appendByte(out []int32, b byte) []int32 {
	if id := t.byteTok[b]; id >= 0 {
		return append(out, id)
	}
	if t.unk >= 0 {
		return append(out, t.unk)
	}
	return out
}

// escapeSpaces replaces every space with "▁", prefixing one when prefix is set.
func escapeSpaces(text string, prefix bool) string {
	if prefix {
		return spaceEscape + strings.ReplaceAll(text, " ", spaceEscape)
	}
	return strings.ReplaceAll(text, " ", spaceEscape)
}
