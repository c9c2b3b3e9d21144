package jsonschema

import (
	"context"
	"fmt"
	"math"
	"regexp/syntax"
	"strings"
	"unicode/utf8"

	"ubatch/grammar/regex"
)

// patternGrammar returns a GBNF expression for the JSON string contents (between the quotes)
// whose decoded value matches the regular expression pattern, as JSON Schema's pattern keyword
// means it: unanchored unless it starts with ^ or ends with $. The grammar writes the value's
// characters as they are, except " and \ which it escapes; characters that JSON must escape
// otherwise (controls) are left out of classes, so the grammar matches a subset of the
// pattern's strings. Lookaround, backreferences, inner anchors and word boundaries are refused
// (grammar/regex writes the rest); case folding is written out.
func patternGrammar(pattern string) (string, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return "", fmt.Errorf("pattern %q: %v", pattern, err)
	}
	// Not re.Simplify(): it expands x{n} into n copies of x, output a thousand times the input;
	// regexGBNF writes counted repetitions as GBNF's own.
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	head, tail := "plain-char* ", " plain-char*"
	if len(subs) > 0 && subs[0].Op == syntax.OpBeginText {
		head, subs = "", subs[1:]
	}
	if n := len(subs); n > 0 && subs[n-1].Op == syntax.OpEndText {
		tail, subs = "", subs[:n-1]
	}
	var parts []string
	for _, s := range subs {
		p, err := regexGBNF(s)
		if err != nil {
			return "", fmt.Errorf("pattern %q: %v", pattern, err)
		}
		parts = append(parts, p)
	}
	body := strings.Join(parts, " ")
	if body == "" {
		body = `""`
	}
	return head + "(" + body + ")" + tail, nil
}

// regexGBNF writes re with grammar/regex's converter, its characters as a JSON string's
// contents (jsonCharset); the schema's own output limit bounds the grammar as a whole.
func regexGBNF(re *syntax.Regexp) (string, error) {
	return regex.Expr(context.Background(), re, jsonCharset, math.MaxInt)
}

// jsonCharset writes a pattern's characters as JSON string contents: " and \ escaped, controls
// as \u escapes in literals and left out of classes and of . (plain-char has none).
var jsonCharset = regex.Charset{
	Char:  jsonChar,
	Class: charClass,
	Any:   func(bool) string { return "(plain-char | " + jsonChar('"') + " | " + jsonChar('\\') + ")" },
}

// jsonChar is the GBNF for one character of a JSON string's contents.
func jsonChar(r rune) string {
	switch {
	case r == '"':
		return `"\\\""`
	case r == '\\':
		return `"\\\\"`
	case r < 0x20 || r == 0x7F:
		return fmt.Sprintf(`"\\u%04x"`, r)
	}
	return literal(string(r))
}

// charClass writes the class given as range pairs, without the characters JSON escapes (a
// subset, so any output still matches); " and \ come back as their escapes.
func charClass(pairs []rune) (string, error) {
	var sb strings.Builder
	var extra []string
	for i := 0; i+1 < len(pairs); i += 2 {
		lo, hi := pairs[i], min(pairs[i+1], utf8.MaxRune)
		for _, cut := range []struct {
			r   rune
			alt string
		}{{'"', jsonChar('"')}, {'\\', jsonChar('\\')}} {
			if lo <= cut.r && cut.r <= hi {
				extra = append(extra, cut.alt)
			}
		}
		for _, r := range splitOut(lo, hi) {
			fmt.Fprintf(&sb, `\U%08X-\U%08X`, r[0], r[1])
		}
	}
	var alts []string
	if sb.Len() > 0 {
		alts = append(alts, "["+sb.String()+"]")
	}
	alts = append(alts, extra...)
	if len(alts) == 0 {
		return "", fmt.Errorf("a character class of control characters only is not supported")
	}
	return "(" + strings.Join(alts, " | ") + ")", nil
}

// splitOut returns [lo, hi] without controls, 0x7F, " and \.
func splitOut(lo, hi rune) [][2]rune {
	out := [][2]rune{{lo, hi}}
	for _, cut := range [][2]rune{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}} {
		var next [][2]rune
		for _, r := range out {
			if r[1] < cut[0] || r[0] > cut[1] {
				next = append(next, r)
				continue
			}
			if r[0] < cut[0] {
				next = append(next, [2]rune{r[0], cut[0] - 1})
			}
			if r[1] > cut[1] {
				next = append(next, [2]rune{cut[1] + 1, r[1]})
			}
		}
		out = next
	}
	return out
}
