// Package regex converts regular expressions (RE2 syntax, as Go's regexp/syntax reads it) to
// GBNF, so that the grammar engine can hold generated text to a regex: vLLM's guided_regex
// (the whole output matches), and JSON Schema's pattern (grammar/jsonschema, which writes the
// characters as a JSON string's contents through a Charset of its own).
//
// The regex's language is kept exactly, as far as GBNF can say it: literals, classes (case
// folding written out), ., groups, alternation, *, +, ? and counted repetition (x{m,n} as
// GBNF's own, not copied out). What a context-free grammar over the output cannot say is
// refused: anchors and word boundaries inside the regex (^ and $ at its ends are the whole
// output's, which it matches anyway). Go's parser itself refuses backreferences and lookaround.
package regex

import (
	"context"
	"errors"
	"fmt"
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"

	"ubatch/grammar"
)

// Charset writes the characters of a regex as GBNF: Grammar's is raw text; a JSON string's
// contents need escapes (grammar/jsonschema).
type Charset struct {
	// Char writes one literal character.
	Char func(r rune) string
	// Class writes a character class given as sorted [lo, hi] pairs, as regexp/syntax gives
	// them; it may drop characters it cannot write (the grammar then matches a subset), and
	// fails when none is left.
	Class func(pairs []rune) (string, error)
	// Any writes . (nl: (?s), so it matches a newline too).
	Any func(nl bool) string
}

// Text is the Charset of raw text: every character as itself.
var Text = Charset{Char: textChar, Class: textClass, Any: textAny}

// ErrUnsupported is wrapped by the errors of a regex that parses but that GBNF cannot follow
// (an anchor or a word boundary inside it).
var ErrUnsupported = errors.New("not supported in a grammar")

// Parse parses pattern as Go's regexp does (Perl syntax), with an error that says what is
// wrong. Backreferences and lookaround are Perl syntax that RE2 refuses.
func Parse(pattern string) (*syntax.Regexp, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		var se *syntax.Error
		if errors.As(err, &se) && (se.Code == syntax.ErrInvalidPerlOp || se.Code == syntax.ErrInvalidEscape) {
			return nil, fmt.Errorf("%v (lookaround and backreferences are not supported)", err)
		}
		return nil, err
	}
	return re, nil
}

// Grammar returns a GBNF grammar whose sentences are exactly the texts that pattern matches
// from start to end (as regexp.MatchString of ^(?:pattern)$ would). lim bounds the work: a
// pattern longer than lim.MaxBytes, or a grammar that would be, is a *grammar.LimitError; the
// rest of lim (repetitions, elements, time) is for grammar.Compile, which the caller runs next.
func Grammar(ctx context.Context, pattern string, lim grammar.Limits) (string, error) {
	maxBytes := lim.MaxBytes
	if maxBytes <= 0 {
		maxBytes = grammar.DefaultMaxBytes
	}
	if len(pattern) > maxBytes {
		return "", &grammar.LimitError{Limit: grammar.LimitBytes, Max: maxBytes, Got: len(pattern)}
	}
	re, err := Parse(pattern)
	if err != nil {
		return "", err
	}
	re = trimAnchors(re)
	body, err := Expr(ctx, re, Text, maxBytes)
	if err != nil {
		return "", err
	}
	return "root ::= " + body + "\n", nil
}

// trimAnchors drops a leading ^ (\A) and a trailing $ (\z): the grammar matches the whole
// output anyway.
func trimAnchors(re *syntax.Regexp) *syntax.Regexp {
	switch {
	case re.Op == syntax.OpBeginText || re.Op == syntax.OpEndText:
		return &syntax.Regexp{Op: syntax.OpEmptyMatch}
	case re.Op != syntax.OpConcat:
		return re
	}
	subs := re.Sub
	if len(subs) > 0 && subs[0].Op == syntax.OpBeginText {
		subs = subs[1:]
	}
	if n := len(subs); n > 0 && subs[n-1].Op == syntax.OpEndText {
		subs = subs[:n-1]
	}
	out := *re
	out.Sub = subs
	return &out
}

// Expr returns the GBNF expression of re's language, its characters written by cs. Its size
// is bounded by maxBytes (a *grammar.LimitError past it): a class such as \pL is hundreds of
// ranges, so a short regex could otherwise write a large grammar.
func Expr(ctx context.Context, re *syntax.Regexp, cs Charset, maxBytes int) (string, error) {
	c := converter{ctx: ctx, cs: cs, max: maxBytes}
	return c.expr(re)
}

type converter struct {
	ctx   context.Context
	cs    Charset
	max   int
	nodes int
}

// grew checks the size of an expression just written, and the request's context now and
// then (a regex within the byte limit converts in milliseconds, but its client may be gone).
func (c *converter) grew(s string, err error) (string, error) {
	if err != nil {
		return "", err
	}
	if len(s) > c.max {
		return "", &grammar.LimitError{Limit: grammar.LimitBytes, Max: c.max, Got: len(s)}
	}
	if c.nodes++; c.nodes%256 == 0 && c.ctx.Err() != nil {
		return "", c.ctx.Err()
	}
	return s, nil
}

func (c *converter) expr(re *syntax.Regexp) (string, error) {
	return c.grew(c.node(re))
}

func (c *converter) node(re *syntax.Regexp) (string, error) {
	switch re.Op {
	case syntax.OpEmptyMatch:
		return `""`, nil
	case syntax.OpLiteral:
		return c.literal(re)
	case syntax.OpCharClass:
		// The parser has already added the folded cases of a (?i) class.
		return c.cs.Class(re.Rune)
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		return c.cs.Any(re.Op == syntax.OpAnyChar), nil
	case syntax.OpCapture:
		p, err := c.expr(re.Sub[0])
		return "(" + p + ")", err
	case syntax.OpQuest:
		p, err := c.expr(re.Sub[0])
		return "(" + p + ")?", err
	case syntax.OpStar, syntax.OpPlus, syntax.OpRepeat:
		return c.repeat(re)
	case syntax.OpConcat, syntax.OpAlternate:
		sep := " "
		if re.Op == syntax.OpAlternate {
			sep = " | "
		}
		var sb strings.Builder
		sb.WriteByte('(')
		for i, s := range re.Sub {
			p, err := c.expr(s)
			if err != nil {
				return "", err
			}
			if i > 0 {
				sb.WriteString(sep)
			}
			sb.WriteString(p)
			if sb.Len() > c.max {
				return "", &grammar.LimitError{Limit: grammar.LimitBytes, Max: c.max, Got: sb.Len()}
			}
		}
		sb.WriteByte(')')
		return sb.String(), nil
	}
	return "", fmt.Errorf("%s is %w", opName(re.Op), ErrUnsupported)
}

// repeat writes x*, x+ and x{m,n}; a body that matches empty is repeated without its empty
// match (nullable.go), which GBNF needs and which leaves the language as it is.
func (c *converter) repeat(re *syntax.Regexp) (string, error) {
	lo, hi := re.Min, re.Max
	switch re.Op {
	case syntax.OpStar:
		lo, hi = 0, -1
	case syntax.OpPlus:
		lo, hi = 1, -1
	}
	sub := re.Sub[0]
	if nullable(sub) {
		if sub, lo = nonEmpty(sub), 0; sub == nil {
			return `""`, nil
		}
	}
	p, err := c.expr(sub)
	switch {
	case lo == 0 && hi < 0:
		return "(" + p + ")*", err
	case lo == 1 && hi < 0:
		return "(" + p + ")+", err
	case hi < 0:
		return fmt.Sprintf("(%s){%d,}", p, lo), err
	}
	return fmt.Sprintf("(%s){%d,%d}", p, lo, hi), err
}

// literal writes a run of characters; under (?i) each becomes the class of its case variants.
func (c *converter) literal(re *syntax.Regexp) (string, error) {
	var parts []string
	size := 0
	for _, r := range re.Rune {
		var p string
		if re.Flags&syntax.FoldCase != 0 && unicode.SimpleFold(r) != r {
			var err error
			if p, err = c.cs.Class(foldPairs(r)); err != nil {
				return "", err
			}
		} else {
			p = c.cs.Char(r)
		}
		if size += len(p) + 1; size > c.max {
			return "", &grammar.LimitError{Limit: grammar.LimitBytes, Max: c.max, Got: size}
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return `""`, nil
	}
	return "(" + strings.Join(parts, " ") + ")", nil
}

// foldPairs is the class of r and its case variants (k, K and the Kelvin sign for k), as
// sorted single-rune pairs.
func foldPairs(r rune) []rune {
	orbit := []rune{r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		orbit = append(orbit, f)
	}
	for i := 1; i < len(orbit); i++ { // insertion sort: an orbit has at most 4 runes
		for j := i; j > 0 && orbit[j] < orbit[j-1]; j-- {
			orbit[j], orbit[j-1] = orbit[j-1], orbit[j]
		}
	}
	pairs := make([]rune, 0, 2*len(orbit))
	for _, o := range orbit {
		pairs = append(pairs, o, o)
	}
	return pairs
}

func opName(op syntax.Op) string {
	switch op {
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText:
		return "an anchor inside the regex"
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return "a word boundary"
	case syntax.OpNoMatch:
		return "a regex that matches nothing"
	}
	return op.String()
}

// textChar writes r as a GBNF literal: printable ASCII as itself (but " and \ escaped),
// everything else as \U so that no character can break the grammar's syntax.
func textChar(r rune) string {
	switch {
	case r == '"' || r == '\\':
		return `"\` + string(r) + `"`
	case r >= 0x20 && r < 0x7F:
		return `"` + string(r) + `"`
	}
	return fmt.Sprintf(`"\U%08X"`, clampRune(r))
}

// textClass writes a class of raw text, every bound as \U (no character needs escaping then).
func textClass(pairs []rune) (string, error) {
	var sb strings.Builder
	sb.WriteByte('[')
	for i := 0; i+1 < len(pairs); i += 2 {
		lo, hi := clampRune(pairs[i]), clampRune(pairs[i+1])
		if lo == hi {
			fmt.Fprintf(&sb, `\U%08X`, lo)
		} else {
			fmt.Fprintf(&sb, `\U%08X-\U%08X`, lo, hi)
		}
	}
	if sb.Len() == 1 {
		return "", fmt.Errorf("an empty character class is %w", ErrUnsupported)
	}
	sb.WriteByte(']')
	return sb.String(), nil
}

func textAny(nl bool) string {
	if nl {
		return `[\U00000000-\U0010FFFF]`
	}
	return `[^\n]`
}

func clampRune(r rune) rune { return min(max(r, 0), utf8.MaxRune) }

// Literal writes s as one GBNF literal of raw text (vLLM's guided_choice), escaped as Grammar
// escapes characters.
func Literal(s string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, r := range s {
		c := textChar(r)
		sb.WriteString(c[1 : len(c)-1])
	}
	sb.WriteByte('"')
	return sb.String()
}
