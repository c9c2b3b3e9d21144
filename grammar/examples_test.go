package grammar

import (
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// The languages of llama.cpp's example grammars (grammars/*.gbnf and the GBNF guide), written
// afresh, each with a checker that does not use this package: a string the matcher accepts must
// pass the checker, and a random derivation of the grammar must pass both.

const jsonGBNF = `# any JSON text
root   ::= ws value ws
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member ::= string ws ":" ws value
array  ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n\r]*
`

const arithmeticGBNF = `# lines of "expression = term"
root   ::= ( line "\n" )+
line   ::= expr "=" ws term
expr   ::= term ( [-+*/] term )*
term   ::= ( name | digits | "(" ws expr ")" ) ws
name   ::= [a-z] [a-z0-9_]*
digits ::= [0-9]+
ws     ::= [ \t]*
`

const chessGBNF = `# numbered move pairs in algebraic notation
root   ::= (
    "1. " turn
    ( [1-9] [0-9]? ". " turn )+
)
turn   ::= move " " move "\n"
move   ::= ( pawn | piece | castle ) [+#]?
piece  ::= [NBKQR] [a-h]? [1-8]? "x"? square
pawn   ::= ( file "x" )? square ( "=" [NBKQR] )?
castle ::= "O-O" "-O"?
square ::= file [1-8]
file   ::= [a-h]
`

const listGBNF = `root ::= ( "- " line )+
line ::= [^\n]+ "\n"
`

const japaneseGBNF = `root  ::= char+ ( [ \t\n] char+ )*
char  ::= hira | kata | punct | kanji
hira  ::= [ぁ-ゟ]
kata  ::= [\u30A1-\u30FF]
punct ::= [、-〾]
kanji ::= [一-\U00009FFF]
`

const englishGBNF = `root   ::= word ( [ \t\n] word )*
word   ::= ( letter | digit | punct )+
letter ::= [a-zA-Z]
digit  ::= [0-9]
punct  ::= [!-/:-@\x5B-\x60{-~]
`

func checkJSON(s string) bool { return json.Valid([]byte(s)) }

// checkArithmetic is a recursive-descent recognizer of the arithmetic language.
func checkArithmetic(s string) bool {
	if s == "" || !strings.HasSuffix(s, "\n") {
		return false
	}
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		p := &arith{s: line}
		if !p.expr() || !p.eat('=') {
			return false
		}
		p.ws()
		if !p.term() || p.i != len(p.s) {
			return false
		}
	}
	return true
}

type arith struct {
	s string
	i int
}

func (p *arith) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *arith) eat(c byte) bool {
	if p.peek() == c {
		p.i++
		return true
	}
	return false
}

func (p *arith) ws() {
	for p.peek() == ' ' || p.peek() == '\t' {
		p.i++
	}
}

func (p *arith) term() bool {
	switch c := p.peek(); {
	case c >= 'a' && c <= 'z':
		for c := p.peek(); c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'; c = p.peek() {
			p.i++
		}
	case c >= '0' && c <= '9':
		for c := p.peek(); c >= '0' && c <= '9'; c = p.peek() {
			p.i++
		}
	case c == '(':
		p.i++
		p.ws()
		if !p.expr() || !p.eat(')') {
			return false
		}
	default:
		return false
	}
	p.ws()
	return true
}

func (p *arith) expr() bool {
	if !p.term() {
		return false
	}
	for strings.IndexByte("+-*/", p.peek()) >= 0 && p.peek() != 0 {
		p.i++
		if !p.term() {
			return false
		}
	}
	return true
}

var (
	chessMove = `(?:(?:[a-h]x)?[a-h][1-8](?:=[NBKQR])?|[NBKQR][a-h]?[1-8]?x?[a-h][1-8]|O-O(?:-O)?)[+#]?`
	chessRe   = regexp.MustCompile(`^1\. ` + chessMove + ` ` + chessMove + `\n(?:[1-9][0-9]?\. ` + chessMove + ` ` + chessMove + `\n)+$`)
	listRe    = regexp.MustCompile(`^(?:- [^\n]+\n)+$`)
	jpRe      = regexp.MustCompile(`^[ぁ-ゟァ-ヿ、-〾一-鿿]+(?:[ \t\n][ぁ-ゟァ-ヿ、-〾一-鿿]+)*$`)
	enRe      = regexp.MustCompile("^[a-zA-Z0-9!-/:-@\\[-`{-~]+(?:[ \t\n][a-zA-Z0-9!-/:-@\\[-`{-~]+)*$")
)

type example struct {
	name     string
	src      string
	check    func(string) bool
	good     []string
	bad      []string
	depth    int // derivation depth before the shortest alternatives are forced
	walkStop float64
}

func examples() []example {
	return []example{
		{name: "json", src: jsonGBNF, check: checkJSON, depth: 6, walkStop: 0.5,
			good: []string{`{}`, ` [1, -2.5e+3, "a\u00e9\"", true, null, {"k": []}] `, `"日本"`, `0`, `{"a":{"b":[false]}}`},
			bad:  []string{`{`, `01`, `[1,]`, `{"a" 1}`, `"tab	in string"`, `nul`, `1.`, `"\x"`}},
		{name: "arithmetic", src: arithmeticGBNF, check: checkArithmetic, depth: 5, walkStop: 0.3,
			good: []string{"a=b\n", "x1 +(y*2)/3 = z\n(a)=4\n", "12=( 3 -4 )\n"},
			bad:  []string{"a=b", " a=b\n", "a=b+c\n", "=a\n", "(a=b\n", "A=b\n"}},
		{name: "chess", src: chessGBNF, check: chessRe.MatchString, depth: 4, walkStop: 0.3,
			good: []string{"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n3. O-O-O+ exd8=Q#\n"},
			bad:  []string{"1. e4 e5\n", "1. e9 e5\n2. a1 a2\n", "1. e4  e5\n2. a3 a4\n", "2. e4 e5\n3. a3 a4\n"}},
		{name: "list", src: listGBNF, check: listRe.MatchString, depth: 4, walkStop: 0.3,
			good: []string{"- a\n", "- milk\n- eggs ü\n"},
			bad:  []string{"", "- \n", "-a\n", "- a"}},
		{name: "japanese", src: japaneseGBNF, check: jpRe.MatchString, depth: 4, walkStop: 0.3,
			good: []string{"こんにちは", "日本語 カタカナ、\tひらがな"},
			bad:  []string{"", "abc", "日本 ", " 日本", "日本\u3000語"}},
		{name: "english", src: englishGBNF, check: enRe.MatchString, depth: 4, walkStop: 0.3,
			good: []string{"Hello, world!", "a-b [c] \\d `e` {f}|g~"},
			bad:  []string{"", "two  spaces", "é", "trailing "}},
	}
}

func TestExampleGrammars(t *testing.T) {
	for _, ex := range examples() {
		t.Run(ex.name, func(t *testing.T) {
			g := mustParse(t, ex.src)
			for _, s := range ex.good {
				if !ex.check(s) {
					t.Fatalf("checker rejects good example %q", s)
				}
				if !accepts(g, s) {
					t.Errorf("grammar rejects %q", s)
				}
			}
			for _, s := range ex.bad {
				if ex.check(s) {
					t.Fatalf("checker accepts bad example %q", s)
				}
				if accepts(g, s) {
					t.Errorf("grammar accepts %q", s)
				}
			}
			rng := rand.New(rand.NewPCG(7, uint64(len(ex.name))))
			for range 300 {
				s := derive(g, rng, ex.depth)
				if !ex.check(s) {
					t.Fatalf("derived %q fails the checker", s)
				}
				if !accepts(g, s) {
					t.Fatalf("matcher rejects the derived sentence %q", s)
				}
			}
			complete := 0
			for range 300 {
				s, ok := walkBytes(g, rng, ex.walkStop, 400)
				if ok {
					if !validUTF8(s) {
						t.Fatalf("walk produced invalid UTF-8 %q", s)
					}
					complete++
					if !ex.check(s) {
						t.Fatalf("matcher accepted %q, which fails the checker", s)
					}
				}
			}
			if complete < 30 {
				t.Fatalf("only %d of 300 byte walks completed", complete)
			}
			v := testVocab(t, ex.good...)
			complete = 0
			for range 40 {
				s, ok := walkTokens(t, g, v, rng, 120)
				if ok {
					complete++
					if !ex.check(s) {
						t.Fatalf("token walk ended with %q, which fails the checker", s)
					}
				}
			}
			if complete < 5 {
				t.Fatalf("only %d of 40 token walks completed", complete)
			}
		})
	}
}
