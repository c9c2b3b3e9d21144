package grammar

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// vocabOf builds a Vocab from the given pieces; token 0 is end of generation.
func vocabOf(t testing.TB, pieces ...string) *Vocab {
	t.Helper()
	ps := [][]byte{nil}
	for _, p := range pieces {
		ps = append(ps, []byte(p))
	}
	v, err := NewVocab(ps, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func maskHas(mask []uint64, t int32) bool { return mask[t>>6]&(1<<(t&63)) != 0 }

func allowedTokens(m *Matcher) []int32 {
	var out []int32
	mask := m.Mask()
	for t := range int32(m.v.Size()) {
		if maskHas(mask, t) {
			out = append(out, t)
		}
	}
	return out
}

func TestMaskAndTokens(t *testing.T) {
	// ids:             1     2    3      4     5       6       7       8       9
	v := vocabOf(t, "ab", "a", "abc", "b", "\xc3", "\xa9", "é", "", "ba")
	g := mustParse(t, `root ::= "ab" "é"? "b"*`)
	tests := []struct {
		name    string
		prefix  []int32
		allowed []int32
	}{
		{name: "start", allowed: []int32{1, 2}},
		{name: "after a", prefix: []int32{2}, allowed: []int32{4}},
		{name: "complete", prefix: []int32{1}, allowed: []int32{0, 4, 5, 7}},
		{name: "inside a character", prefix: []int32{1, 5}, allowed: []int32{6}},
		{name: "after é", prefix: []int32{1, 7}, allowed: []int32{0, 4}},
		{name: "split é", prefix: []int32{1, 5, 6, 4}, allowed: []int32{0, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMatcher(g, v)
			for _, tok := range tt.prefix {
				if err := m.AcceptToken(tok); err != nil {
					t.Fatal(err)
				}
			}
			got := allowedTokens(m)
			if !slices.Equal(got, tt.allowed) {
				t.Fatalf("allowed %v, want %v", got, tt.allowed)
			}
			for tok := range int32(v.Size()) {
				if m.Allowed(tok) != maskHas(m.Mask(), tok) {
					t.Fatalf("Allowed(%d) disagrees with the mask", tok)
				}
			}
		})
	}
}

func TestAcceptTokenErrors(t *testing.T) {
	v := vocabOf(t, "a", "b", "")
	g := mustParse(t, `root ::= "a"`)
	m := NewMatcher(g, v)
	if err := m.AcceptToken(0); err == nil || !strings.Contains(err.Error(), "not complete") {
		t.Fatalf("EOG before the end: %v", err)
	}
	if err := m.AcceptToken(2); err == nil {
		t.Fatal("accepted b")
	}
	if err := m.AcceptToken(3); err == nil || !strings.Contains(err.Error(), "no text") {
		t.Fatalf("empty token: %v", err)
	}
	if err := m.AcceptToken(9); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Fatalf("out of range: %v", err)
	}
	if err := m.AcceptToken(1); err != nil {
		t.Fatal(err)
	}
	if allowed := allowedTokens(m); !slices.Equal(allowed, []int32{0}) {
		t.Fatalf("complete grammar allows %v, want only EOG", allowed)
	}
	if err := m.AcceptToken(0); err != nil || !m.Done() {
		t.Fatalf("EOG at the end: %v, done %v", err, m.Done())
	}
	if err := m.AcceptToken(1); err == nil || m.Allowed(1) {
		t.Fatal("accepted a token after the end")
	}
	m.Reset()
	if m.Done() || m.Complete() || !m.Allowed(1) {
		t.Fatal("Reset did not return to the start")
	}
}

func TestDeadEndMask(t *testing.T) {
	// The grammar wants "x" but no token spells it.
	v := vocabOf(t, "a", "b")
	m := NewMatcher(mustParse(t, `root ::= "a" "x"`), v)
	if err := m.AcceptToken(1); err != nil {
		t.Fatal(err)
	}
	for _, w := range m.Mask() {
		if w != 0 {
			t.Fatalf("mask %b, want none", w)
		}
	}
}

func TestCompaction(t *testing.T) {
	g := mustParse(t, jsonGBNF)
	v := testVocab(t, `{"key": [1, 2.5, "s\u00e9"], "n": null}`)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		seed := rng.Uint64()
		small := NewMatcher(g, v)
		small.nodeLimit, small.stateLimit = 8, 4
		big := NewMatcher(g, v)
		r := rand.New(rand.NewPCG(seed, 0))
		for step := 0; step < 200; step++ {
			ms, mb := small.Mask(), big.Mask()
			var allowed []int32
			for tok := range int32(v.Size()) {
				if maskHas(ms, tok) != maskHas(mb, tok) {
					t.Fatalf("step %d: token %d differs after compaction", step, tok)
				}
				if maskHas(ms, tok) && tok != 0 {
					allowed = append(allowed, tok)
				}
			}
			if len(allowed) == 0 {
				break
			}
			tok := allowed[r.IntN(len(allowed))]
			if err := small.AcceptToken(tok); err != nil {
				t.Fatal(err)
			}
			if err := big.AcceptToken(tok); err != nil {
				t.Fatal(err)
			}
			if small.Complete() != big.Complete() {
				t.Fatalf("step %d: completeness differs", step)
			}
		}
		if len(small.nodes) > 64 && len(small.states) > 64 {
			t.Fatalf("small matcher kept %d nodes, %d states", len(small.nodes), len(small.states))
		}
	}
}

func TestDeepNesting(t *testing.T) {
	g := mustParse(t, jsonGBNF)
	m := NewMatcher(g, nil)
	n := 5000
	s := strings.Repeat("[", n) + "1" + strings.Repeat("]", n)
	if err := m.AcceptBytes([]byte(s)); err != nil || !m.Complete() {
		t.Fatalf("deep array: %v", err)
	}
}

func TestTooAmbiguous(t *testing.T) {
	// After n a's the parse can owe any of the 2^n sequences of closers: the matcher must refuse
	// instead of tracking them all, and say why.
	g := mustParse(t, `root ::= "a" root "x" | "a" root "y" | ""`)
	m := NewMatcher(g, nil)
	m.SetBudget(1 << 30) // the parse limit, not the work budget (which is lower), is under test
	if err := m.AcceptBytes([]byte(strings.Repeat("a", 10))); err != nil {
		t.Fatalf("10 a's (1024 parses): %v", err)
	}
	err := m.AcceptBytes([]byte(strings.Repeat("a", 10)))
	if !errors.Is(err, ErrTooAmbiguous) || !errors.Is(m.Err(), ErrTooAmbiguous) {
		t.Fatalf("20 a's: got %v, want ErrTooAmbiguous", err)
	}
}

func TestNewVocabErrors(t *testing.T) {
	if _, err := NewVocab([][]byte{[]byte("a")}, []int32{3}); err == nil {
		t.Fatal("accepted an EOG token outside the vocabulary")
	}
}
