package regex

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"ubatch/grammar"
)

// accepts reports whether s is a whole sentence of g, by the matcher.
func accepts(g *grammar.Grammar, s string) bool {
	m := grammar.NewMatcher(g, nil)
	return m.AcceptBytes([]byte(s)) == nil && m.Complete()
}

func compile(t testing.TB, pattern string) *grammar.Grammar {
	t.Helper()
	src, err := Grammar(context.Background(), pattern, grammar.Limits{})
	if err != nil {
		t.Fatalf("Grammar(%q): %v", pattern, err)
	}
	g, err := grammar.Parse(src)
	if err != nil {
		t.Fatalf("Parse of the grammar of %q: %v\n%s", pattern, err, src)
	}
	return g
}

// TestGrammarMatchesRegexp holds each grammar against Go's regexp, anchored at both ends, on
// strings that match and strings that do not.
func TestGrammarMatchesRegexp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pattern string
		inputs  []string
	}{
		{name: "literal", pattern: "abc", inputs: []string{"abc", "ab", "abcd", "xabc", ""}},
		{name: "anchors trimmed", pattern: "^a+$", inputs: []string{"a", "aaa", "", "ab"}},
		{name: "alternation", pattern: "yes|no|maybe", inputs: []string{"yes", "no", "maybe", "yesno", "may"}},
		{name: "classes", pattern: `[A-Z]{2}-\d{3}(x|yz)?`, inputs: []string{"AB-123", "AB-123x", "AB-123yz", "ab-123", "AB-12", "AB-1234"}},
		{name: "negated class", pattern: `[^a-y]+`, inputs: []string{"z", "zZ9", "a", "", "é"}},
		{name: "dot without newline", pattern: `a.c`, inputs: []string{"abc", "a\nc", "aéc", "ac"}},
		{name: "dot with newline", pattern: `(?s)a.c`, inputs: []string{"abc", "a\nc"}},
		{name: "counted open", pattern: `x{2,}`, inputs: []string{"x", "xx", "xxxxx"}},
		{name: "quotes and backslashes", pattern: `"\\"[\]\[-]`, inputs: []string{`"\"]`, `"\"[`, `"\"-`, `"\"x`}},
		{name: "controls", pattern: "\t\\n\\x00?", inputs: []string{"\t\n", "\t\n\x00", "\t"}},
		{name: "case folding", pattern: `(?i)ok k`, inputs: []string{"ok k", "OK K", "oK \u212a", "ox k"}},
		{name: "unicode class", pattern: `\p{Greek}+`, inputs: []string{"αβγ", "abc"}},
		{name: "empty", pattern: ``, inputs: []string{"", "a"}},
		{name: "star of group", pattern: `(ab|c)*d`, inputs: []string{"d", "abcabd", "abad"}},
		{name: "star of nullable", pattern: `(a|)*(b?c?)+(x*y*){2,3}`, inputs: []string{"", "aa", "abcbc", "xyxy", "yx", "z"}},
		{name: "json-like", pattern: `\{"n": [0-9]+\}`, inputs: []string{`{"n": 42}`, `{"n": }`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := compile(t, tc.pattern)
			re := regexp.MustCompile(`^(?:` + tc.pattern + `)$`)
			for _, s := range tc.inputs {
				if got, want := accepts(g, s), re.MatchString(s); got != want {
					t.Errorf("%q: grammar accepts %v, regexp matches %v\n%s", s, got, want, g)
				}
			}
		})
	}
}

// TestGrammarRefuses: what a grammar cannot follow is an error that says what, never a
// grammar that silently matches something else.
func TestGrammarRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, pattern, want string
	}{
		{name: "lookahead", pattern: `a(?=b)`, want: "lookaround"},
		{name: "backreference", pattern: `(a)\1`, want: "backreferences"},
		{name: "inner anchor", pattern: `a^b`, want: "anchor inside"},
		{name: "multiline anchor", pattern: `(?m)^a$`, want: "anchor inside"},
		{name: "word boundary", pattern: `\bword\b`, want: "word boundary"},
		{name: "empty class", pattern: `[^\x00-\x{10FFFF}]`, want: "empty character class"},
		{name: "syntax", pattern: `a(b`, want: "missing closing )"},
		{name: "huge repeat", pattern: `a{1001}`, want: "invalid repeat count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Grammar(context.Background(), tc.pattern, grammar.Limits{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Grammar(%q) = %v, want an error with %q", tc.pattern, err, tc.want)
			}
		})
	}
}

// TestGrammarLimits: the pattern and the grammar are bounded by MaxBytes, and repetitions by
// the compiler's limits.
func TestGrammarLimits(t *testing.T) {
	lim := grammar.Limits{MaxBytes: 4096}
	for _, tc := range []struct {
		name, pattern string
	}{
		{name: "long pattern", pattern: strings.Repeat("a", 5000)},
		{name: "wide classes", pattern: strings.Repeat(`\pL`, 50)}, // 350 bytes of regex, ~30 KB of grammar
		{name: "wide folded literal", pattern: "(?i)" + strings.Repeat("k", 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := Grammar(context.Background(), tc.pattern, lim)
			var le *grammar.LimitError
			if !errors.As(err, &le) || le.Limit != grammar.LimitBytes {
				t.Fatalf("got %d bytes, %v; want a LimitError on bytes", len(src), err)
			}
		})
	}
	// Counts pass the converter as GBNF's own {m,n} (Go's parser caps them at 1000, nested
	// ones too) and meet the compiler's repetition limit.
	src, err := Grammar(context.Background(), `(ab){1000}`, grammar.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = grammar.Compile(context.Background(), src, grammar.Limits{MaxRepetition: 999})
	var le *grammar.LimitError
	if !errors.As(err, &le) || le.Limit != grammar.LimitRepetition {
		t.Fatalf("compiling %q: %v, want a LimitError on repetitions", src, err)
	}
}

func TestGrammarCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Grammar(ctx, strings.Repeat("(a|b)", 2000), grammar.Limits{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// FuzzGrammar: the converter never panics, its output is bounded by the limit, and whatever
// the regex matches wholly the grammar accepts, and the other way round.
func FuzzGrammar(f *testing.F) {
	for _, s := range []struct{ pattern, input string }{
		{"abc", "abc"}, {`[A-Z]{2}-\d{3}`, "AB-123"}, {"(?i)k+", "Kk"}, {`(?s).*`, "a\nb"},
		{`[^"\\]*`, `a"b`}, {"x{2,5}|y?", "xxx"}, {`\p{Han}+`, "漢字"}, {"(a|)*", ""}, {`a(?=b)`, "ab"},
		{`[\x00-\x1f]`, "\x01"}, {`((a{10}){10}){10}`, "a"},
	} {
		f.Add(s.pattern, s.input)
	}
	const maxBytes = 1 << 14
	f.Fuzz(func(t *testing.T, pattern, input string) {
		src, err := Grammar(context.Background(), pattern, grammar.Limits{MaxBytes: maxBytes})
		if err != nil {
			return
		}
		if len(src) > maxBytes+len("root ::= \n") {
			t.Fatalf("%d bytes of grammar from %q, over the limit of %d", len(src), pattern, maxBytes)
		}
		g, err := grammar.Compile(context.Background(), src, grammar.Limits{MaxBytes: 2 * maxBytes, MaxElements: 1 << 16})
		if err != nil {
			var le *grammar.LimitError
			if !errors.As(err, &le) {
				t.Fatalf("the grammar of %q does not compile: %v\n%s", pattern, err, src)
			}
			return
		}
		if !utf8.ValidString(input) {
			return
		}
		re := regexp.MustCompile(`^(?:` + pattern + `)$`)
		m := grammar.NewMatcher(g, nil)
		err = m.AcceptBytes([]byte(input))
		if errors.Is(err, grammar.ErrBudget) || errors.Is(err, grammar.ErrTooAmbiguous) {
			return
		}
		if got, want := err == nil && m.Complete(), re.MatchString(input); got != want {
			t.Fatalf("%q on %q: grammar accepts %v, regexp matches %v\n%s", pattern, input, got, want, src)
		}
	})
}

// TestLiteral: any text, quotes, backslashes, controls and invalid UTF-8 included, is one
// literal the grammar matches exactly (invalid bytes as U+FFFD, as Go's range over a string).
func TestLiteral(t *testing.T) {
	for _, tc := range []struct{ name, text string }{
		{name: "plain", text: "yes"},
		{name: "quotes", text: `say "hi" \ \n`},
		{name: "controls", text: "a\tb\nc\x00\x7f"},
		{name: "unicode", text: "héllo 漢字 🙂"},
		{name: "empty", text: ""},
		{name: "grammar syntax", text: `root ::= [a] | (b)* {1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := grammar.Parse("root ::= " + Literal(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if !accepts(g, tc.text) || accepts(g, tc.text+"x") {
				t.Errorf("the literal %s does not match exactly %q", Literal(tc.text), tc.text)
			}
		})
	}
}
