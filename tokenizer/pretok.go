package tokenizer

import "unicode"

// A matcher emulates one pre-tokenizer regex (an alternation tried leftmost-first, with
// backtracking where the regex has it) at position pos of rs[:end]: it returns the length in
// runes of the match starting at pos, or 0 if the regex does not match there. Lookahead such as
// (?!\S) sees end as the end of input, as the regex engine does on each fragment.
type matcher func(rs []rune, pos, end int) int

// preTokenizer is a BPE pre-tokenizer: each pass splits every fragment produced by the previous
// pass into the regex matches and the unmatched runs between them (both kept), exactly as
// llama.cpp's unicode_regex_split does with its list of regexes.
type preTokenizer struct {
	passes       []matcher
	ignoreMerges bool // a pre-token that is itself a token skips the merges
	addBOS       bool // llama.cpp's default for add_bos_token with this pre-tokenizer
	noBOS        bool // llama.cpp's default BOS id is "none" instead of 11
}

var (
	preDefault = preTokenizer{passes: []matcher{matchPunctRun("$+<=>^~|"), matchGPT2, matchNumberRun, matchThreeDigits}}
	preGPT2    = preTokenizer{passes: []matcher{matchGPT2}}
	preLlama3  = preTokenizer{passes: []matcher{matchLlama3(3)}, ignoreMerges: true, addBOS: true}
	preDBRX    = preTokenizer{passes: []matcher{matchLlama3(3)}}
	preGLM4    = preTokenizer{passes: []matcher{matchLlama3(3)}, noBOS: true}
	preQwen2   = preTokenizer{passes: []matcher{matchLlama3(1)}}
	preStar    = preTokenizer{passes: []matcher{matchOneNumber, matchGPT2}}
	preFalcon  = preTokenizer{passes: []matcher{matchPunctRun("$+<=>^~|`"), matchGPT2, matchThreeDigits}}
	preDSCoder = preTokenizer{passes: []matcher{matchNewline, matchSpaceThen(isLetter), matchSpaceThen(unicode.IsPunct), matchCJK, matchOneNumber}}
	preO200k   = preTokenizer{passes: []matcher{matchO200k}}
)

// preTokenizers maps tokenizer.ggml.pre names to pre-tokenizers (llama.cpp's grouping).
var preTokenizers = map[string]preTokenizer{
	"": preDefault, "default": preDefault,

	"llama3": preLlama3, "llama-v3": preLlama3, "llama-bpe": preLlama3, "falcon3": preLlama3,
	"falcon-h1": preLlama3, "pixtral": preLlama3, "midm-2.0": preLlama3, "lfm2": preLlama3,
	"jina-v5-nano": preLlama3,
	"dbrx":         preDBRX, "smaug-bpe": preDBRX, "glm4": preGLM4, "chatglm-bpe": preGLM4,

	"qwen2": preQwen2, "deepseek-r1-qwen": preQwen2, "kormo": preQwen2, "f2llmv2": preQwen2,
	"stablelm2": preQwen2, "hunyuan": preQwen2, "solar-open": preQwen2, "megrez": preQwen2,
	"grok-2": preQwen2,

	"gpt-2": preGPT2, "phi-2": preGPT2, "jina-es": preGPT2, "jina-de": preGPT2, "gigachat": preGPT2,
	"jina-v2-es": preGPT2, "jina-v2-de": preGPT2, "a.x-4.0": preGPT2, "mellum": preGPT2,
	"modern-bert": preGPT2, "mpt": preGPT2, "olmo": preGPT2, "jais": preGPT2, "trillion": preGPT2,
	"granite-docling": preGPT2, "exaone4": preGPT2, "jina-v1-en": preGPT2, "jina-v2-code": preGPT2,
	"roberta-bpe": preGPT2,

	"starcoder": preStar, "refact": preStar, "command-r": preStar, "smollm": preStar,
	"codeshell": preStar, "exaone": preStar, "minerva-7b": preStar, "mellum2": preStar,

	"falcon":         preFalcon,
	"deepseek-coder": preDSCoder,

	// gpt-oss's o200k (llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT4O)
	"gpt-4o": preO200k, "llama4": preO200k,
}

// Character classes of the regexes. \s is Unicode White_Space, which is what unicode.IsSpace
// tests; \p{L} and \p{N} are the general categories.
func isSpace(r rune) bool  { return unicode.IsSpace(r) }
func isLetter(r rune) bool { return unicode.IsLetter(r) }
func isNumber(r rune) bool { return unicode.IsNumber(r) }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r) }

// run returns how many runes from pos on satisfy class.
func run(rs []rune, pos, end int, class func(rune) bool) int {
	i := pos
	for i < end && class(rs[i]) {
		i++
	}
	return i - pos
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d, ASCII case-insensitively when fold is set.
func contraction(rs []rune, pos, end int, fold bool) int {
	if rs[pos] != '\'' || pos+1 >= end {
		return 0
	}
	low := func(r rune) rune {
		if fold && r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	switch low(rs[pos+1]) {
	case 's', 't', 'm', 'd':
		return 2
	}
	if pos+2 < end {
		a, b := low(rs[pos+1]), low(rs[pos+2])
		if (a == 'r' || a == 'v') && b == 'e' || a == 'l' && b == 'l' {
			return 3
		}
	}
	return 0
}

// matchGPT2 is 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
func matchGPT2(rs []rune, pos, end int) int {
	if n := contraction(rs, pos, end, false); n > 0 {
		return n
	}
	start := pos
	if rs[pos] == ' ' && pos+1 < end && !isSpace(rs[pos+1]) {
		start = pos + 1 // the optional space, taken whenever a non-space follows
	}
	for _, class := range []func(rune) bool{isLetter, isNumber, isOther} {
		if class(rs[start]) {
			return start - pos + run(rs, start, end, class)
		}
	}
	// rs[pos] is whitespace: \s+(?!\S) backtracks to leave the last space before a non-space
	// to the next match; a lone space before a non-space does not match at all.
	k := run(rs, pos, end, isSpace)
	if pos+k < end {
		return k - 1
	}
	return k
}

// matchLlama3 is llama3's regex with \p{N}{1,digits} (digits = 1 gives Qwen2's):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func matchLlama3(digits int) matcher {
	return func(rs []rune, pos, end int) int {
		if n := contraction(rs, pos, end, true); n > 0 {
			return n
		}
		r := rs[pos]
		if isLetter(r) {
			return run(rs, pos, end, isLetter)
		}
		if r != '\r' && r != '\n' && !isNumber(r) && pos+1 < end && isLetter(rs[pos+1]) {
			return 1 + run(rs, pos+1, end, isLetter)
		}
		if isNumber(r) {
			return run(rs, pos, min(end, pos+digits), isNumber)
		}
		if n := symbolRun(rs, pos, end, isLineBreak); n > 0 {
			return n
		}
		return spaceRun(rs, pos, end) // r is whitespace
	}
}

func isLineBreak(r rune) bool        { return r == '\r' || r == '\n' }
func isLineBreakOrSlash(r rune) bool { return isLineBreak(r) || r == '/' }

// symbolRun is  ?[^\s\p{L}\p{N}]+<trail>*, the symbols of llama3's regex and its kin (trail is
// [\r\n] there, [\r\n/] in o200k's); 0 when it does not match.
func symbolRun(rs []rune, pos, end int, trail func(rune) bool) int {
	start := pos
	if rs[pos] == ' ' && pos+1 < end && isOther(rs[pos+1]) {
		start = pos + 1
	}
	if !isOther(rs[start]) {
		return 0
	}
	i := start + run(rs, start, end, isOther)
	return run(rs, i, end, trail) + i - pos
}

// spaceRun is \s*[\r\n]+|\s+(?!\S)|\s+ at whitespace: up to the run's last line break, else
// all but the space before a non-space, else the one space.
func spaceRun(rs []rune, pos, end int) int {
	k := run(rs, pos, end, isSpace)
	for i := pos + k - 1; i >= pos; i-- {
		if isLineBreak(rs[i]) {
			return i + 1 - pos
		}
	}
	if pos+k < end && k > 1 {
		return k - 1 // \s+(?!\S)
	}
	return k // \s+
}

// matchPunctRun is [\p{P}<extra>]+.
func matchPunctRun(extra string) matcher {
	class := func(r rune) bool {
		if unicode.IsPunct(r) {
			return true
		}
		for _, e := range extra {
			if r == e {
				return true
			}
		}
		return false
	}
	return func(rs []rune, pos, end int) int { return run(rs, pos, end, class) }
}

// matchNumberRun is \p{N}+.
func matchNumberRun(rs []rune, pos, end int) int { return run(rs, pos, end, isNumber) }

// matchOneNumber is \p{N}.
func matchOneNumber(rs []rune, pos, end int) int {
	if isNumber(rs[pos]) {
		return 1
	}
	return 0
}

// matchThreeDigits is [0-9][0-9][0-9].
func matchThreeDigits(rs []rune, pos, end int) int {
	if pos+3 <= end && isASCIIDigit(rs[pos]) && isASCIIDigit(rs[pos+1]) && isASCIIDigit(rs[pos+2]) {
		return 3
	}
	return 0
}

func isASCIIDigit(r rune) bool { return r >= '0' && r <= '9' }

// matchNewline is [\r\n].
func matchNewline(rs []rune, pos, end int) int {
	if rs[pos] == '\r' || rs[pos] == '\n' {
		return 1
	}
	return 0
}

// matchSpaceThen is \s?<class>+.
func matchSpaceThen(class func(rune) bool) matcher {
	return func(rs []rune, pos, end int) int {
		start := pos
		if isSpace(rs[pos]) && pos+1 < end && class(rs[pos+1]) {
			start = pos + 1
		}
		if n := run(rs, start, end, class); n > 0 {
			return start - pos + n
		}
		return 0
	}
}

// matchCJK is [一-龥ࠀ-一가-퟿]+ (U+4E00–U+9FA5, U+0800–U+4E00, U+AC00–U+D7FF).
func matchCJK(rs []rune, pos, end int) int {
	return run(rs, pos, end, func(r rune) bool {
		return r >= 0x0800 && r <= 0x9FA5 || r >= 0xAC00 && r <= 0xD7FF
	})
}

// upperish is o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], lowerish its [\p{Ll}\p{Lm}\p{Lo}\p{M}]:
// a word's capitals and its lower-case rest, the uncased letters and the marks in both.
func upperish(r rune) bool {
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

func lowerish(r rune) bool {
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}

// matchO200k is o200k's regex (tiktoken's o200k_base, gpt-oss's and GPT-4o's):
//
//	[^\r\n\p{L}\p{N}]?[U]*[L]+C?|[^\r\n\p{L}\p{N}]?[U]+[L]*C?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// with U upperish, L lowerish and C a contraction ('s, 't, 're, 've, 'm, 'll, 'd in any case), so
// that CamelCase splits before each capital. It follows the original pattern, whose classes
// hold the combining marks (\p{M}); llama.cpp runs a rewrite of it that leaves them out, so on
// text with combining marks its pieces differ from tiktoken's and from these.
func matchO200k(rs []rune, pos, end int) int {
	r := rs[pos]
	prefix := r != '\r' && r != '\n' && !isLetter(r) && !isNumber(r)
	// The two word alternatives, each first with the optional prefix rune taken, then without.
	for _, lowerRun := range []bool{true, false} {
		for _, skip := range []bool{true, false} {
			if skip && (!prefix || pos+1 >= end) {
				continue
			}
			start := pos
			if skip {
				start++
			}
			if n := o200kWord(rs, start, end, lowerRun); n > 0 {
				return start - pos + n
			}
		}
	}
	if isNumber(r) {
		return run(rs, pos, min(end, pos+3), isNumber)
	}
	if n := symbolRun(rs, pos, end, isLineBreakOrSlash); n > 0 {
		return n
	}
	return spaceRun(rs, pos, end) // r is whitespace
}

// o200kWord matches one of o200k's word alternatives at start, [U]*[L]+ (lowerRun) or
// [U]+[L]*, and the optional contraction after it; it returns the length, 0 for no match.
func o200kWord(rs []rune, start, end int, lowerRun bool) int {
	u := run(rs, start, end, upperish)
	n := u
	if lowerRun {
		// [U]* backs off until [L]+ can start: the longest k <= u with a lowerish rune at k.
		k := u
		for k >= 0 && (start+k >= end || !lowerish(rs[start+k])) {
			k--
		}
		if k < 0 {
			return 0
		}
		n = k
	} else if u == 0 {
		return 0
	}
	n += run(rs, start+n, end, lowerish)
	if start+n < end {
		n += contraction(rs, start+n, end, true)
	}
	return n
}

// split runs the passes over rs and returns the end offsets (in runes) of the resulting pieces,
// appended to ends[:0]; tmp is scratch space. Both are returned for reuse.
func (p *preTokenizer) split(rs []rune, ends, tmp []int32) ([]int32, []int32) {
	ends = append(ends[:0], int32(len(rs)))
	for _, m := range p.passes {
		tmp = tmp[:0]
		start := 0
		for _, e := range ends {
			end := int(e)
			pos, unmatched := start, start
			for pos < end {
				n := m(rs, pos, end)
				if n <= 0 {
					pos++
					continue
				}
				if unmatched < pos {
					tmp = append(tmp, int32(pos))
				}
				pos += n
				tmp = append(tmp, int32(pos))
				unmatched = pos
			}
			if unmatched < end {
				tmp = append(tmp, int32(end))
			}
			start = end
		}
		ends, tmp = tmp, ends
	}
	return ends, tmp
}
