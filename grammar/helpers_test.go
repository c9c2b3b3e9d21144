package grammar

import (
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

func mustParse(t testing.TB, src string) *Grammar {
	t.Helper()
	g, err := Parse(src)
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, src)
	}
	return g
}

// accepts reports whether s is a complete sentence of g, by the matcher.
func accepts(g *Grammar, s string) bool {
	m := NewMatcher(g, nil)
	return m.AcceptBytes([]byte(s)) == nil && m.Complete()
}

// minLens is the length of the shortest string each rule derives (by fixpoint over the compiled
// rules, independently of the matcher).
func minLens(g *Grammar) []int {
	const inf = 1 << 30
	ml := make([]int, len(g.rules))
	for i := range ml {
		ml[i] = inf
	}
	for changed := true; changed; {
		changed = false
		for id, r := range g.rules {
			for _, a := range r.alts {
				n := 0
				for p := a; g.elems[p].op != opEnd; p++ {
					if e := g.elems[p]; e.op == opTerm {
						n++
					} else {
						n += ml[e.arg]
					}
				}
				if n < ml[id] {
					ml[id], changed = n, true
				}
			}
		}
	}
	return ml
}

// derive returns a random sentence of g: a random derivation from root that takes the shortest
// alternatives once it is deeper than depth, with a random byte of each terminal set (UTF-8
// lowering keeps every choice inside one sequence valid).
func derive(g *Grammar, rng *rand.Rand, depth int) string {
	ml := minLens(g)
	var out []byte
	var rule func(id int32, d int)
	rule = func(id int32, d int) {
		alts := g.rules[id].alts
		a := alts[rng.IntN(len(alts))]
		if d > depth {
			best := -1
			for _, c := range alts {
				n := 0
				for p := c; g.elems[p].op != opEnd; p++ {
					if e := g.elems[p]; e.op == opTerm {
						n++
					} else {
						n += ml[e.arg]
					}
				}
				if best < 0 || n < best {
					best, a = n, c
				}
			}
		}
		for p := a; g.elems[p].op != opEnd; p++ {
			e := g.elems[p]
			if e.op == opRef {
				rule(e.arg, d+1)
				continue
			}
			s := g.sets[e.arg]
			var members []byte
			for b := range 256 {
				if s.has(byte(b)) {
					members = append(members, byte(b))
				}
			}
			out = append(out, members[rng.IntN(len(members))])
		}
	}
	rule(g.root, 0)
	return string(out)
}

// walkBytes follows the matcher with random bytes among those it allows, stopping with
// probability stop at each point where the output is complete. It returns the output and
// whether it is complete (false when maxLen was reached first).
func walkBytes(g *Grammar, rng *rand.Rand, stop float64, maxLen int) (string, bool) {
	m := NewMatcher(g, nil)
	var out []byte
	for len(out) < maxLen {
		if m.Complete() && rng.Float64() < stop {
			return string(out), true
		}
		var ok []byte
		for b := range 256 {
			if m.step(m.cur, byte(b)) != 0 {
				ok = append(ok, byte(b))
			}
		}
		if len(ok) == 0 {
			return string(out), m.Complete()
		}
		b := ok[rng.IntN(len(ok))]
		if err := m.AcceptBytes([]byte{b}); err != nil {
			panic(err) // the step said b was allowed
		}
		out = append(out, b)
	}
	return string(out), false
}

// testVocab is a vocabulary of every ASCII character, some multi-byte characters whole and split
// into their bytes, and multi-character tokens taken from samples, with one end-of-generation
// token (id 0, no text) and one control token (id 1, no text).
func testVocab(t testing.TB, samples ...string) *Vocab {
	t.Helper()
	pieces := [][]byte{nil, nil}
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			pieces = append(pieces, []byte(p))
		}
	}
	for c := range 128 {
		add(string(rune(c)))
	}
	for _, r := range "éü€日本語ぁァ、一😀" {
		s := string(r)
		add(s)
		for i := range len(s) {
			add(s[i : i+1])
		}
		add(s[:len(s)-1])
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range samples {
		for range 64 {
			if len(s) == 0 {
				break
			}
			i := rng.IntN(len(s))
			j := min(len(s), i+1+rng.IntN(6))
			add(s[i:j])
		}
	}
	v, err := NewVocab(pieces, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// walkTokens follows the matcher with random tokens from its mask until it picks the
// end-of-generation token or reaches maxTokens. Every step it checks the mask against Allowed for
// every token (the trie walk against the direct one). It returns the text and whether the
// end-of-generation token ended it.
func walkTokens(t testing.TB, g *Grammar, v *Vocab, rng *rand.Rand, maxTokens int) (string, bool) {
	t.Helper()
	m := NewMatcher(g, v)
	var out []byte
	for range maxTokens {
		mask := m.Mask()
		var allowed []int32
		for tok := range int32(v.Size()) {
			in := mask[tok>>6]&(1<<(tok&63)) != 0
			if in != m.Allowed(tok) {
				t.Fatalf("after %q: token %d (%q): mask says %v, Allowed says %v", out, tok, v.piece(tok), in, !in)
			}
			if in {
				allowed = append(allowed, tok)
			}
		}
		if len(allowed) == 0 {
			return string(out), false
		}
		// Prefer ending when possible half the time, so that walks finish.
		tok := allowed[rng.IntN(len(allowed))]
		if m.Complete() && rng.IntN(2) == 0 {
			tok = 0
		}
		if err := m.AcceptToken(tok); err != nil {
			t.Fatalf("after %q: AcceptToken(%d) of a masked token: %v", out, tok, err)
		}
		if tok == 0 {
			return string(out), true
		}
		out = append(out, v.piece(tok)...)
	}
	return string(out), false
}

func validUTF8(s string) bool { return utf8.ValidString(s) }
