package grammar

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"ubatch/internal/testdata"
)

// Issue 19's hostile grammars, built here rather than stored.

// optionalChain is root ::= ("a"?){0,n} "b" repeated k times before "b": every optional item is
// nullable, so the start state expands every link of every chain.
func optionalChain(k, n int) string {
	return "root ::= " + strings.Repeat(fmt.Sprintf(`("a"?){0,%d} `, n), k) + `"b"` + "\n"
}

func manyAlternatives(n int) string {
	var sb strings.Builder
	sb.WriteString("root ::= ")
	for i := range n {
		if i > 0 {
			sb.WriteString(" | ")
		}
		sb.WriteString(`"x"`) // 4 bytes each: 100000 of them stay within MaxBytes
	}
	return sb.String() + "\n"
}

// chainedRules is root ::= r0, r0 ::= r1, ... r(n-1) ::= "x", with base-36 names so that
// 60000 rules stay within MaxBytes.
func chainedRules(n int) string {
	var sb strings.Builder
	name := func(i int) string { return "r" + strconv.FormatInt(int64(i), 36) }
	sb.WriteString("root ::= r0\n")
	for i := range n - 1 {
		fmt.Fprintf(&sb, "%s ::= %s\n", name(i), name(i+1))
	}
	fmt.Fprintf(&sb, "%s ::= \"x\"\n", name(n-1))
	return sb.String()
}

func TestCompileLimits(t *testing.T) {
	tests := []struct {
		name     string
		src      string
		lim      Limits
		limit    string
		max, got int // got 0: not checked (compilation stops just past max)
	}{
		{name: "repetition", src: `root ::= ("a"?){0,70000} "b"`, limit: LimitRepetition, max: DefaultMaxRepetition, got: 70000},
		{name: "repetition overflow", src: `root ::= "a"{99999999999999999999}`, limit: LimitRepetition, max: DefaultMaxRepetition},
		{name: "start parses", src: optionalChain(8, 9000), limit: LimitStart, max: maxVisits},
		{name: "alternatives", src: manyAlternatives(100000), limit: LimitAlternatives, max: DefaultMaxAlternatives, got: DefaultMaxAlternatives + 1},
		{name: "chained rules", src: chainedRules(60000), limit: LimitRules, max: DefaultMaxRules, got: DefaultMaxRules + 1},
		{name: "elements", src: "root ::= " + strings.Repeat(`"a"{0,10000} `, 14), limit: LimitElements, max: DefaultMaxElements},
		{name: "bytes", src: `root ::= "` + strings.Repeat("a", DefaultMaxBytes) + `"`, limit: LimitBytes, max: DefaultMaxBytes, got: DefaultMaxBytes + len(`root ::= ""`)},
		{name: "attack of the mask", src: testdata.MaskAttackGBNF(), limit: LimitElements, max: DefaultMaxElements},
		{name: "lowered rules", src: chainedRules(10), lim: Limits{MaxRules: 5}, limit: LimitRules, max: 5, got: 6},
		{name: "lowered time", src: optionalChain(1, 5000), lim: Limits{MaxTime: time.Nanosecond}, limit: LimitTime, max: 0, got: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Compile(context.Background(), tt.src, tt.lim)
			var le *LimitError
			if !errors.As(err, &le) || g != nil {
				t.Fatalf("got %v, %v; want a LimitError", g, err)
			}
			if le.Limit != tt.limit || le.Max != tt.max || le.Got <= le.Max || tt.got != 0 && le.Got != tt.got {
				t.Fatalf("got %+v, want limit %q, max %d, got %d", le, tt.limit, tt.max, tt.got)
			}
			want := fmt.Sprintf("grammar: %d %s exceed the limit of %d (", le.Got, tt.limit, tt.max)
			if !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("message %q, want it to start with %q", err, want)
			}
			if tt.limit == LimitStart && !errors.Is(err, ErrTooAmbiguous) {
				t.Fatalf("a start-state error should match ErrTooAmbiguous: %v", err)
			}
		})
	}
}

// TestCompileWithinLimits compiles grammars at the edge of the defaults: they still work, and the
// program stays within MaxElements.
func TestCompileWithinLimits(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		yes, no string
	}{
		{name: "repetition", src: `root ::= "a"{0,10000} "b"`, yes: strings.Repeat("a", 10000) + "b", no: strings.Repeat("a", 10001) + "b"},
		{name: "alternatives", src: manyAlternatives(DefaultMaxAlternatives), yes: "x", no: "xx"},
		{name: "chained rules", src: chainedRules(DefaultMaxRules - 1), yes: "x", no: "xx"},
		{name: "elements", src: "root ::= " + strings.Repeat(`"a"{0,10000} `, 12), yes: "aaa", no: "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Compile(context.Background(), tt.src, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if len(g.elems) > DefaultMaxElements || len(g.rules) > DefaultMaxElements {
				t.Fatalf("%d elements, %d rules: beyond the limit", len(g.elems), len(g.rules))
			}
			if !accepts(g, tt.yes) || accepts(g, tt.no) {
				t.Fatalf("accepts(%.20q) = %v, accepts(%.20q) = %v", tt.yes, accepts(g, tt.yes), tt.no, accepts(g, tt.no))
			}
		})
	}
}

func TestCompileCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Compile(ctx, `root ::= "a"`, Limits{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestDeadStart builds a matcher on a grammar whose start state is beyond the matcher's parse
// limit (Compile refuses it; compile does not check): it must be dead, not panic.
func TestDeadStart(t *testing.T) {
	g, err := compile(context.Background(), optionalChain(8, 9000), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	v := vocabOf(t, "a", "b")
	m := NewMatcher(g, v)
	if !errors.Is(m.Err(), ErrTooAmbiguous) {
		t.Fatalf("Err %v, want ErrTooAmbiguous", m.Err())
	}
	mask := m.Mask()
	if len(mask) != 1 || mask[0] != 0 {
		t.Fatalf("mask %v, want one zero word", mask)
	}
	if m.Allowed(1) || m.Complete() {
		t.Fatal("a dead matcher allows a token or is complete")
	}
	if err := m.AcceptToken(2); !errors.Is(err, ErrTooAmbiguous) {
		t.Fatalf("AcceptToken: %v, want ErrTooAmbiguous", err)
	}
	if err := m.AcceptBytes([]byte("b")); !errors.Is(err, ErrTooAmbiguous) {
		t.Fatalf("AcceptBytes: %v, want ErrTooAmbiguous", err)
	}
}

// budgetGBNF is a small version of the mask attack: many alternatives that never merge.
func budgetGBNF() string {
	return "root ::= " + strings.Repeat(`[^!\x00]{0,50} "END" | `, 40) + `"END"` + "\n"
}

func TestBudget(t *testing.T) {
	g := mustParse(t, budgetGBNF())
	v := vocabOf(t, "hello world, END", "END", "x")
	unbounded := NewMatcher(g, v)
	unbounded.SetBudget(1 << 40)
	want := unbounded.Mask()
	if unbounded.Err() != nil || want[0] == 0 {
		t.Fatalf("unbounded mask %v, err %v", want, unbounded.Err())
	}
	tests := []struct {
		name string
		call func(m *Matcher) error
	}{
		{name: "mask", call: func(m *Matcher) error {
			for _, w := range m.Mask() {
				if w != 0 {
					return errors.New("a mask over budget is not empty")
				}
			}
			return nil
		}},
		{name: "allowed", call: func(m *Matcher) error {
			if m.Allowed(1) {
				return errors.New("a token check over budget allowed the token")
			}
			return nil
		}},
		{name: "accept token", call: func(m *Matcher) error {
			if err := m.AcceptToken(1); !errors.Is(err, ErrBudget) {
				return fmt.Errorf("AcceptToken: %v, want ErrBudget", err)
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMatcher(g, v)
			m.SetBudget(50)
			if err := tt.call(m); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(m.Err(), ErrBudget) || !strings.Contains(m.Err().Error(), "more than 50 units") {
				t.Fatalf("Err %v, want ErrBudget with the budget", m.Err())
			}
			// Stopped: later calls fail at once, whatever their cost.
			if m.Allowed(1) || m.AcceptBytes([]byte("h")) == nil || m.Mask()[0] != 0 {
				t.Fatal("a stopped matcher still works")
			}
			// Reset restarts it; the default budget suffices for this grammar.
			m.Reset()
			m.SetBudget(0)
			if got := m.Mask(); m.Err() != nil || !slices.Equal(got, want) {
				t.Fatalf("after Reset: mask %v, err %v; want %v", got, m.Err(), want)
			}
		})
	}
}

// TestCompileLinear checks that compile memory grows linearly with a user rule's name, which
// each synthetic rule once copied: 10000 rules of a 100 KB name were a gigabyte.
func TestCompileLinear(t *testing.T) {
	name := strings.Repeat("n", 100000)
	src := "root ::= " + name + "\n" + name + ` ::= "a"{0,10000}`
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	g, err := Compile(context.Background(), src, Limits{})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Fatalf("compiling a %d-byte grammar allocated %d MB", len(src), alloc>>20)
	}
	if !accepts(g, strings.Repeat("a", 10000)) || g.userName(len(g.rules)-1) != name {
		t.Fatal("the grammar does not match, or its synthetic rules lost their user rule's name")
	}
}
