package grammar

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxNesting bounds parentheses inside one another, so that parsing cannot exhaust the stack.
const maxNesting = 256

type nodeKind uint8

const (
	nSeq    nodeKind = iota // kids in order
	nAlt                    // one of kids (a parenthesised group)
	nLit                    // lit, as UTF-8
	nClass                  // one code point in ranges (already negated and normalized)
	nRef                    // the rule called name
	nRepeat                 // kids[0] repeated min..max times (max < 0: unbounded)
)

// node is the parsed form of a rule body.
type node struct {
	kind     nodeKind
	kids     []*node
	lit      []byte
	ranges   []runeRange
	name     string
	min, max int
	at       int // offset in the source, for errors
}

// ruleDef is one "name ::= alternatives" line.
type ruleDef struct {
	name string
	alts []*node // each an nSeq
	at   int
}

// SyntaxError reports where a grammar does not parse.
type SyntaxError struct {
	Line, Col int // 1-based; Col counts bytes
	Msg       string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("grammar: line %d, column %d: %s", e.Line, e.Col, e.Msg)
}

// parser reads GBNF as llama.cpp's grammar parser does: rules are separated by newlines, a
// newline may continue a rule only inside parentheses or after "|", and "#" starts a comment that
// runs to the end of the line.
type parser struct {
	src   string
	pos   int
	depth int
	rules []ruleDef
	lim   Limits // with defaults
	clk   *clock
}

// parseGBNF parses src within lim (whose fields are all set) and clk.
func parseGBNF(src string, lim Limits, clk *clock) ([]ruleDef, error) {
	if !utf8.ValidString(src) {
		i := 0
		for i < len(src) {
			r, n := utf8.DecodeRuneInString(src[i:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			i += n
		}
		p := &parser{src: src}
		return nil, p.errAt(i, "the grammar is not valid UTF-8")
	}
	p := &parser{src: src, lim: lim, clk: clk}
	p.space(true)
	for p.pos < len(p.src) {
		if len(p.rules) >= lim.MaxRules {
			return nil, &LimitError{Limit: LimitRules, Max: lim.MaxRules, Got: len(p.rules) + 1}
		}
		if err := p.rule(); err != nil {
			return nil, err
		}
	}
	return p.rules, nil
}

func (p *parser) errAt(at int, format string, args ...any) error {
	line := 1 + strings.Count(p.src[:at], "\n")
	col := at - strings.LastIndexByte(p.src[:at], '\n')
	return &SyntaxError{Line: line, Col: col, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) errf(format string, args ...any) error { return p.errAt(p.pos, format, args...) }

func (p *parser) peek() byte {
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

func (p *parser) eof() bool { return p.pos >= len(p.src) }

// space skips blanks and comments, and newlines when newlineOK.
func (p *parser) space(newlineOK bool) {
	for !p.eof() {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t':
			p.pos++
		case c == '#':
			for !p.eof() && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
				p.pos++
			}
		case newlineOK && (c == '\n' || c == '\r'):
			p.pos++
		default:
			return
		}
	}
}

func isWordChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

func (p *parser) name() (string, error) {
	start := p.pos
	for !p.eof() && isWordChar(p.src[p.pos]) {
		p.pos++
	}
	if p.pos == start {
		return "", p.errf("expected a rule name (letters, digits and '-')")
	}
	return p.src[start:p.pos], nil
}

func (p *parser) rule() error {
	at := p.pos
	name, err := p.name()
	if err != nil {
		return err
	}
	p.space(false)
	if !strings.HasPrefix(p.src[p.pos:], "::=") {
		return p.errf("expected '::=' after rule name %q", name)
	}
	p.pos += 3
	p.space(true)
	alts, err := p.alternates(false)
	if err != nil {
		return err
	}
	switch p.peek() {
	case '\r':
		p.pos++
		if p.peek() == '\n' {
			p.pos++
		}
	case '\n':
		p.pos++
	case 0:
		if !p.eof() {
			return p.errf("unexpected character %q", p.peek())
		}
	default:
		return p.errf("unexpected %q: expected a newline or the end of the grammar", p.peek())
	}
	p.space(true)
	p.rules = append(p.rules, ruleDef{name: name, alts: alts, at: at})
	return nil
}

// alternates parses sequences separated by "|"; nested says whether newlines may separate
// symbols (inside parentheses).
func (p *parser) alternates(nested bool) ([]*node, error) {
	var alts []*node
	for {
		seq, err := p.sequence(nested)
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		if p.peek() != '|' {
			return alts, nil
		}
		if len(alts) >= p.lim.MaxAlternatives {
			return nil, &LimitError{Limit: LimitAlternatives, Max: p.lim.MaxAlternatives, Got: len(alts) + 1}
		}
		p.pos++
		p.space(true)
	}
}

func (p *parser) sequence(nested bool) (*node, error) {
	seq := &node{kind: nSeq, at: p.pos}
	for !p.eof() {
		if err := p.clk.tick(); err != nil {
			return nil, err
		}
		at := p.pos
		var item *node
		switch c := p.src[p.pos]; {
		case c == '"':
			lit, err := p.literal()
			if err != nil {
				return nil, err
			}
			item = &node{kind: nLit, lit: lit, at: at}
		case c == '[':
			cls, err := p.class()
			if err != nil {
				return nil, err
			}
			item = cls
		case isWordChar(c):
			name, _ := p.name()
			item = &node{kind: nRef, name: name, at: at}
		case c == '(':
			if p.depth >= maxNesting {
				return nil, p.errf("parentheses nested deeper than %d", maxNesting)
			}
			p.depth++
			p.pos++
			p.space(true)
			alts, err := p.alternates(true)
			if err != nil {
				return nil, err
			}
			p.depth--
			if p.peek() != ')' {
				return nil, p.errf("expected ')' to close the group opened at line %d",
					1+strings.Count(p.src[:at], "\n"))
			}
			p.pos++
			item = &node{kind: nAlt, kids: alts, at: at}
		case c == '.':
			p.pos++
			item = &node{kind: nClass, ranges: normalize(nil, true), at: at}
		case c == '*' || c == '+' || c == '?' || c == '{':
			lo, hi, err := p.repetition()
			if err != nil {
				return nil, err
			}
			if len(seq.kids) == 0 {
				return nil, p.errAt(at, "%q must follow a symbol", c)
			}
			last := seq.kids[len(seq.kids)-1]
			seq.kids[len(seq.kids)-1] = &node{kind: nRepeat, kids: []*node{last}, min: lo, max: hi, at: at}
			p.space(nested)
			continue
		default:
			return seq, nil
		}
		seq.kids = append(seq.kids, item)
		p.space(nested)
	}
	return seq, nil
}

// repetition parses *, +, ?, {m}, {m,}, {m,n} or {,n}; max < 0 means unbounded.
func (p *parser) repetition() (lo, hi int, err error) {
	c := p.src[p.pos]
	p.pos++
	switch c {
	case '*':
		return 0, -1, nil
	case '+':
		return 1, -1, nil
	case '?':
		return 0, 1, nil
	}
	p.space(true)
	lo, hi = 0, -1
	if p.peek() != ',' {
		if lo, err = p.integer(); err != nil {
			return 0, 0, err
		}
		p.space(true)
	}
	switch p.peek() {
	case '}':
		p.pos++
		return lo, lo, nil
	case ',':
		p.pos++
		p.space(true)
		if p.peek() >= '0' && p.peek() <= '9' {
			if hi, err = p.integer(); err != nil {
				return 0, 0, err
			}
			p.space(true)
			if hi < lo {
				return 0, 0, p.errf("repetition {%d,%d}: the maximum is below the minimum", lo, hi)
			}
		}
		if p.peek() != '}' {
			return 0, 0, p.errf("expected '}' to close the repetition")
		}
		p.pos++
		return lo, hi, nil
	}
	return 0, 0, p.errf("expected ',' or '}' in the repetition")
}

// integer reads a repetition count, which must be at most lim.MaxRepetition.
func (p *parser) integer() (int, error) {
	const huge = 1 << 30 // counts stop growing here: the error reports at least this
	start, n := p.pos, 0
	for !p.eof() && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
		n = min(n*10+int(p.src[p.pos]-'0'), huge)
		p.pos++
	}
	if p.pos == start {
		return 0, p.errf("expected an integer")
	}
	if n > p.lim.MaxRepetition {
		return 0, &LimitError{Limit: LimitRepetition, Max: p.lim.MaxRepetition, Got: n}
	}
	return n, nil
}

// char reads one possibly escaped character, as llama.cpp does: \xHH, \uHHHH, \UHHHHHHHH, \t,
// \r, \n, \\, \", \[ and \].
func (p *parser) char() (rune, error) {
	if p.eof() {
		return 0, p.errf("unexpected end of the grammar")
	}
	if p.src[p.pos] != '\\' {
		r, n := utf8.DecodeRuneInString(p.src[p.pos:])
		p.pos += n
		return r, nil
	}
	at := p.pos
	if p.pos+1 >= len(p.src) {
		return 0, p.errf("unexpected end of the grammar after '\\'")
	}
	e := p.src[p.pos+1]
	p.pos += 2
	switch e {
	case 'x':
		return p.hex(at, 2)
	case 'u':
		return p.hex(at, 4)
	case 'U':
		return p.hex(at, 8)
	case 't':
		return '\t', nil
	case 'r':
		return '\r', nil
	case 'n':
		return '\n', nil
	case '\\', '"', '[', ']':
		return rune(e), nil
	}
	return 0, p.errAt(at, "unknown escape \\%c (use \\x, \\u, \\U, \\t, \\r, \\n, \\\\, \\\", \\[ or \\])", e)
}

func (p *parser) hex(at, digits int) (rune, error) {
	var v uint32
	for range digits {
		if p.eof() {
			return 0, p.errAt(at, "expected %d hex digits", digits)
		}
		c := p.src[p.pos]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, p.errAt(at, "expected %d hex digits", digits)
		}
		v = v<<4 | uint32(d)
		p.pos++
	}
	if v > utf8.MaxRune {
		return 0, p.errAt(at, "code point U+%X is beyond U+10FFFF", v)
	}
	return rune(v), nil
}

func (p *parser) literal() ([]byte, error) {
	p.pos++ // opening quote
	var out []byte
	for {
		if p.eof() {
			return nil, p.errf("unterminated string literal")
		}
		if p.src[p.pos] == '"' {
			p.pos++
			return out, nil
		}
		at := p.pos
		r, err := p.char()
		if err != nil {
			return nil, err
		}
		if r >= surrogateLo && r <= surrogateHi {
			return nil, p.errAt(at, "U+%04X is a surrogate, which UTF-8 cannot encode", r)
		}
		out = utf8.AppendRune(out, r)
	}
}

func (p *parser) class() (*node, error) {
	at := p.pos
	p.pos++ // [
	neg := false
	if p.peek() == '^' {
		neg = true
		p.pos++
	}
	var rs []runeRange
	for {
		if p.eof() {
			return nil, p.errAt(at, "unterminated character class")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		cat := p.pos
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.peek() == '-' && p.pos+1 < len(p.src) && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errAt(cat, "character range %q-%q is reversed", lo, hi)
			}
		}
		rs = append(rs, runeRange{lo, hi})
	}
	if len(rs) == 0 {
		return nil, p.errAt(at, "empty character class")
	}
	norm := normalize(rs, neg)
	if len(norm) == 0 {
		return nil, p.errAt(at, "the character class matches no character")
	}
	return &node{kind: nClass, ranges: norm, at: at}, nil
}
