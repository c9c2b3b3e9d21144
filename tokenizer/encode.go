package tokenizer

import "strings"

// fragment is either a span of the input text still to be tokenized (tok < 0) or a special
// token split out of it.
type fragment struct {
	start, end int
	tok        int32
}

// Encode tokenizes text. With addSpecial, BOS and EOS are added as the vocabulary asks
// (AddBOS/AddEOS). With parseSpecial, the text of control tokens (e.g. "<|eot_id|>", "<s>")
// becomes those tokens; without it they are tokenized as plain text. User-defined tokens are
// always split out, as llama.cpp and Hugging Face tokenizers do. Invalid UTF-8 is accepted
// (SPM encodes it with byte tokens, BPE reads each bad byte as U+FFFD).
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	return t.encode(text, addSpecial, parseSpecial, true)
}

// EncodeContinuation tokenizes text that continues other text already tokenized (the rest of
// a prompt after a part whose tokens are known): as Encode(text, false, true), but without the
// SentencePiece space prefix at its start, which belongs to the start of the whole text alone
// (a special token inside text is still followed by one). Whether the whole text tokenizes to
// the known part followed by these tokens is the caller's to check: a merge across the seam
// makes them differ.
func (t *Tokenizer) EncodeContinuation(text string) []int32 {
	return t.encode(text, false, true, false)
}

// encode is Encode; atStart says whether text begins the whole text (SPM's space prefix).
func (t *Tokenizer) encode(text string, addSpecial, parseSpecial, atStart bool) []int32 {
	s := t.getScratch()
	defer t.scratch.Put(s)

	out := make([]int32, 0, len(text)/3+2)
	if addSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	prevSpecial := atStart // SPM prefixes a space to text at the start and after special tokens
	for _, f := range t.partition(text, parseSpecial) {
		if f.tok >= 0 {
			out = append(out, f.tok)
			prevSpecial = true
			continue
		}
		raw := text[f.start:f.end]
		if t.spm {
			out = t.encodeSPM(escapeSpaces(raw, t.addSP && prevSpecial), out, s)
		} else {
			out = t.encodeBPE(raw, out, s)
		}
		prevSpecial = false
	}
	if addSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	return out
}

// partition splits text around occurrences of special tokens, longest tokens first. Control and
// unknown tokens are only matched when parseSpecial is set. Tokens with the LStrip/RStrip
// attribute swallow the ASCII whitespace before/after them.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{0, len(text), -1}}
	var next []fragment
	for _, id := range t.specials {
		a := t.attrs[id]
		if !parseSpecial && a&(attrControl|attrUnknown) != 0 {
			continue
		}
		tok := t.tokens[id]
		if !strings.Contains(text, tok) {
			continue // cheap rejection: most special tokens never occur
		}
		next = next[:0]
		for _, f := range frags {
			if f.tok >= 0 {
				next = append(next, f)
				continue
			}
			start, end := f.start, f.end
			for start < end {
				k := strings.Index(text[start:end], tok)
				if k < 0 {
					break
				}
				m := start + k
				left := m
				if a&attrLStrip != 0 {
					for left > start && isASCIISpace(text[left-1]) {
						left--
					}
				}
				if left > start {
					next = append(next, fragment{start, left, -1})
				}
				next = append(next, fragment{m, m + len(tok), id})
				start = m + len(tok)
				if a&attrRStrip != 0 {
					for start < end && isASCIISpace(text[start]) {
						start++
					}
				}
			}
			if start < end {
				next = append(next, fragment{start, end, -1})
			}
		}
		frags, next = next, frags
	}
	return frags
}

// isASCIISpace is C's isspace.
func isASCIISpace(c byte) bool {
	return c == ' ' || c >= '\t' && c <= '\r'
}
