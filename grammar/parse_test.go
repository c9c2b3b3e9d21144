package grammar

import (
	"errors"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{name: "empty", src: "", want: "no rule named root"},
		{name: "no root", src: `start ::= "a"`, want: "no rule named root"},
		{name: "undefined", src: `root ::= item`, want: `rule "item" is used but never defined`},
		{name: "missing ::=", src: `root = "a"`, want: "line 1, column 6: expected '::='"},
		{name: "bad name", src: `root ::= "a"` + "\n" + `_x ::= "b"`, want: "line 2, column 1: expected a rule name"},
		{name: "unterminated string", src: `root ::= "abc`, want: "unterminated string literal"},
		{name: "unterminated class", src: `root ::= [abc`, want: "unterminated character class"},
		{name: "empty class", src: `root ::= []`, want: "empty character class"},
		{name: "reversed range", src: `root ::= [z-a]`, want: "reversed"},
		{name: "unknown escape", src: `root ::= "\q"`, want: `unknown escape \q`},
		{name: "short hex", src: `root ::= "\x4"`, want: "expected 2 hex digits"},
		{name: "beyond unicode", src: `root ::= "\U00110000"`, want: "beyond U+10FFFF"},
		{name: "surrogate literal", src: `root ::= "\uD800"`, want: "surrogate"},
		{name: "unclosed group", src: `root ::= ("a" | "b"`, want: "expected ')'"},
		{name: "stray close", src: `root ::= "a" )`, want: "line 1, column 14: unexpected ')'"},
		{name: "leading star", src: `root ::= * "a"`, want: "must follow a symbol"},
		{name: "repeat bounds", src: `root ::= "a"{3,2}`, want: "maximum is below the minimum"},
		{name: "repeat garbage", src: `root ::= "a"{x}`, want: "expected an integer"},
		{name: "repeat too large", src: `root ::= "a"{1000000}`, want: "1000000 repetitions exceed the limit of 10000"},
		{name: "alt on next line", src: "root ::= \"a\"\n  | \"b\"", want: "line 2, column 3: expected a rule name"},
		{name: "left recursion", src: `root ::= root "a" | "a"`, want: `rule "root" is left-recursive`},
		{name: "indirect left recursion", src: "root ::= x\nx ::= y? root \"a\" | \"b\"\ny ::= \"c\"", want: "left-recursive"},
		{name: "never finishes", src: "root ::= \"a\" | \"b\" loop\nloop ::= \"c\" loop", want: `rule "loop" can never finish`},
		{name: "invalid utf8", src: "root ::= \"\xff\"", want: "not valid UTF-8"},
		{name: "deep nesting", src: "root ::= " + strings.Repeat("(", 300) + `"a"` + strings.Repeat(")", 300), want: "nested deeper"},
		{name: "too large", src: "root ::= " + strings.Repeat(`"a"{0,10000} `, 14), want: "elements exceed the limit of 524288"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.src)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestSyntaxErrorType(t *testing.T) {
	_, err := Parse("root ::= \"a\"\nx ::= [")
	var se *SyntaxError
	if !errors.As(err, &se) || se.Line != 2 || se.Col != 7 {
		t.Fatalf("got %#v, want a SyntaxError at line 2, column 7", err)
	}
}

func TestLanguage(t *testing.T) {
	tests := []struct {
		name      string
		src       string
		yes, no   []string
		yesPrefix []string // accepted as incomplete prefixes
	}{
		{name: "literal and escapes", src: `root ::= "a\x41\u00e9\t\n\r\\\"\[\]"`,
			yes: []string{"aAé\t\n\r\\\"[]"}, no: []string{"aA", "aAé\t\n\r\\\"[]x"}},
		{name: "alternation", src: `root ::= "cat" | "dog" | ""`,
			yes: []string{"cat", "dog", ""}, no: []string{"ca", "cow"}, yesPrefix: []string{"ca", "d"}},
		{name: "groups", src: `root ::= ("a" ("b" | "c"))+ "."`,
			yes: []string{"ab.", "acabac."}, no: []string{".", "a.", "abc."}},
		{name: "star plus optional", src: `root ::= "x"* "y"+ "z"?`,
			yes: []string{"y", "xxyyz", "yz"}, no: []string{"", "xz", "yzz"}},
		{name: "exact count", src: `root ::= [0-9]{3}`,
			yes: []string{"123"}, no: []string{"12", "1234"}},
		{name: "bounded", src: `root ::= "a"{2,4}`,
			yes: []string{"aa", "aaa", "aaaa"}, no: []string{"a", "aaaaa"}},
		{name: "at least", src: `root ::= "a"{2,}`,
			yes: []string{"aa", "aaaaaaa"}, no: []string{"a"}},
		{name: "at most", src: `root ::= "a"{,2} "b"`,
			yes: []string{"b", "ab", "aab"}, no: []string{"aaab"}},
		{name: "zero", src: `root ::= "a"{0} "b"`, yes: []string{"b"}, no: []string{"ab"}},
		{name: "repeat of repeat", src: `root ::= ("ab"?){2}`,
			yes: []string{"", "ab", "abab"}, no: []string{"ababab"}},
		{name: "class ranges", src: `root ::= [a-cx-z_]+`,
			yes: []string{"abc_xyz"}, no: []string{"d", "w"}},
		{name: "dash at end", src: `root ::= [a-]+`, yes: []string{"a-a"}, no: []string{"b"}},
		{name: "negated", src: `root ::= [^a-z]+`,
			yes: []string{"A1 é€😀"}, no: []string{"abc", "Ab"}},
		{name: "negated multibyte", src: `root ::= [^é]`,
			yes: []string{"e", "ê", "😀"}, no: []string{"é"}, yesPrefix: []string{"\xc3"}},
		{name: "unicode class", src: `root ::= [ぁ-ゟ]+`,
			yes: []string{"ひらがな"}, no: []string{"カ", "a"}, yesPrefix: []string{"\xe3", "\xe3\x81"}},
		{name: "any", src: `root ::= . . .`,
			yes: []string{"a\n😀", "\x00ab"}, no: []string{"ab", "abcd", "\xff\xfe\xfd"}},
		{name: "newlines in groups and after bar", src: "root ::= (\n  \"a\" # first\n  \"b\"\n) |\n \"c\"\n\n# trailing comment",
			yes: []string{"ab", "c"}, no: []string{"a"}},
		{name: "crlf", src: "root ::= x\r\nx ::= \"a\"\r\n", yes: []string{"a"}},
		{name: "last definition wins", src: "root ::= x\nx ::= \"a\"\nx ::= \"b\"", yes: []string{"b"}, no: []string{"a"}},
		{name: "right recursion", src: "root ::= \"(\" root \")\" | \"\"",
			yes: []string{"", "()", "((()))"}, no: []string{"(()", "())"}},
		{name: "nullable prefix", src: "root ::= opt opt \"x\"\nopt ::= \"a\"?",
			yes: []string{"x", "ax", "aax"}, no: []string{"aaax"}},
		{name: "ambiguous", src: "root ::= (\"a\" | \"a\" \"a\")*", yes: []string{"", "a", "aaaaa"}},
		{name: "rule names", src: "root ::= Item-2\nItem-2 ::= \"ok\"", yes: []string{"ok"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := mustParse(t, tt.src)
			for _, s := range tt.yes {
				if !accepts(g, s) {
					t.Errorf("rejects %q", s)
				}
			}
			for _, s := range tt.no {
				if accepts(g, s) {
					t.Errorf("accepts %q", s)
				}
			}
			for _, s := range tt.yesPrefix {
				m := NewMatcher(g, nil)
				if err := m.AcceptBytes([]byte(s)); err != nil || m.Complete() {
					t.Errorf("prefix %q: err %v, complete %v; want an incomplete prefix", s, err, m.Complete())
				}
			}
		})
	}
}

func TestString(t *testing.T) {
	src := `root ::= "a"`
	if got := mustParse(t, src).String(); got != src {
		t.Fatalf("String() = %q", got)
	}
}
