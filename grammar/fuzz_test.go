package grammar

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse feeds arbitrary grammar text to the parser: it must return a grammar or an error,
// never panic or hang; a grammar it returns must accept its own random derivations, and its mask
// must agree with per-token checks.
func FuzzParse(f *testing.F) {
	for _, ex := range examples() {
		f.Add(ex.src)
	}
	for _, s := range []string{
		`root ::= [^\x00-\x7F]{1,3} | "é"?`, "root ::= (\"a\" | b)*\nb ::= [b-d] b | \"\"",
		`root ::= . . "x"{2,}`, "root ::= ( # c\n \"a\"\n)+", `root ::= "\U0010FFFF" [\u0800-\uFFFF]`,
		// Issue 19: limits (repetition, start parses, elements) and a mask costly enough for the
		// budget.
		`root ::= ("a"?){0,70000} "b"`, optionalChain(8, 9000), "root ::= " + strings.Repeat(`"a"{0,10000} `, 14),
		`root ::= [^!\x00]{0,1000} "END" | [^!\x00]{0,1000} "END" | [^!\x00]{0,1000} "END"`,
		chainedRules(50), manyAlternatives(200),
	} {
		f.Add(s)
	}
	v := testVocab(f, "ab", "{\"k\": 1}", "é日")
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 2000 {
			return
		}
		g, err := Parse(src)
		if err != nil {
			return
		}
		rng := rand.New(rand.NewPCG(uint64(len(src)), 1))
		for range 5 {
			s, ok := boundedDerive(g, rng, 4, 4096)
			if !ok {
				continue
			}
			m := NewMatcher(g, nil)
			if m.AcceptBytes([]byte(s)) != nil || !m.Complete() {
				// A grammar too ambiguous for the matcher's limits may be refused, and must say so
				// (testdata/fuzz/FuzzParse/e8200dda180b8ea7: [0]{0,1000}{1000} over the budget).
				if errors.Is(m.Err(), ErrBudget) || errors.Is(m.Err(), ErrTooAmbiguous) {
					continue
				}
				t.Fatalf("matcher rejects derived %q", s)
			}
		}
		m := NewMatcher(g, v)
		for range 20 {
			mask := m.Mask()
			var next []int32
			for tok := range int32(v.Size()) {
				if maskHas(mask, tok) != m.Allowed(tok) {
					t.Fatalf("mask and Allowed disagree on token %d", tok)
				}
				if maskHas(mask, tok) && tok != 0 {
					next = append(next, tok)
				}
			}
			if len(next) == 0 {
				break
			}
			if err := m.AcceptToken(next[rng.IntN(len(next))]); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// boundedDerive is derive with a cap on the output size (a fuzzed grammar may derive huge
// strings even along its shortest alternatives, e.g. "a"{99999}).
func boundedDerive(g *Grammar, rng *rand.Rand, depth, limit int) (s string, ok bool) {
	for _, n := range minLens(g) {
		if n > limit {
			return "", false
		}
	}
	s = derive(g, rng, depth)
	return s, len(s) <= 16*limit
}

// FuzzJSONMatcher checks the JSON grammar against encoding/json: for valid UTF-8 the matcher
// accepts exactly what json.Valid accepts, whether the text arrives whole or byte by byte.
func FuzzJSONMatcher(f *testing.F) {
	for _, ex := range examples()[0].good {
		f.Add([]byte(ex))
	}
	for _, ex := range examples()[0].bad {
		f.Add([]byte(ex))
	}
	g := mustParse(f, jsonGBNF)
	f.Fuzz(func(t *testing.T, in []byte) {
		if !utf8.Valid(in) {
			return
		}
		m := NewMatcher(g, nil)
		whole := m.AcceptBytes(in) == nil && m.Complete()
		if want := json.Valid(in); whole != want {
			t.Fatalf("%q: matcher %v, json.Valid %v", in, whole, want)
		}
		m.Reset()
		split := true
		for i := range in {
			if m.AcceptBytes(in[i:i+1]) != nil {
				split = false
				break
			}
		}
		if split = split && m.Complete(); split != whole {
			t.Fatalf("%q: byte by byte %v, whole %v", in, split, whole)
		}
	})
}
