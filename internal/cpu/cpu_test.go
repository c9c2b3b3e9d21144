package cpu

import (
	"slices"
	"strings"
	"testing"
)

func TestSelect(t *testing.T) {
	defer Use(Use(Selected()))
	best := Paths()[0]
	for _, name := range append([]string{"auto", "go"}, names[best]) {
		if err := Select(name); err != nil {
			t.Fatalf("Select(%q): %v", name, err)
		}
		want := best
		if name == "go" {
			want = Go
		}
		if Selected() != want {
			t.Errorf("Select(%q) selected %v, want %v", name, Selected(), want)
		}
	}
	for _, name := range []string{"sse9", "avxvnni-evex", ""} {
		if err := Select(name); err == nil || !strings.Contains(err.Error(), "is not available") {
			t.Errorf("Select(%q) = %v, want an error", name, err)
		}
	}
}

func TestPaths(t *testing.T) {
	ps := Paths()
	if len(ps) == 0 {
		t.Fatal("no paths")
	}
	for i, p := range ps {
		if !Has(p) || p == AVXVNNIEvex {
			t.Errorf("path %v listed but not run", p)
		}
		if p == Go && len(ps) > 1 {
			t.Errorf(`"go" listed beside assembly paths %v`, ps)
		}
		// Every path's fallbacks end at the Go twins, through paths the CPU runs.
		for q := p; q != Go; q = q.Lower() {
			if !Has(q) {
				t.Errorf("path %v (#%d) falls back to %v, which this CPU lacks", p, i, q)
			}
		}
	}
	if HasAVX2 && HasNEON {
		t.Error("both amd64 and arm64 instruction sets detected")
	}
}

func TestNearest(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Path
		have []Path
		want Path
	}{
		{name: "own kernel", p: AVX512VNNI, have: []Path{AVX2, AVX512VNNI}, want: AVX512VNNI},
		{name: "falls to avx2", p: AVX512VNNI, have: []Path{AVX2}, want: AVX2},
		{name: "vnni paths do not build on each other", p: AVX512VNNI, have: []Path{AVXVNNI}, want: Go},
		{name: "evex falls to avx2", p: AVXVNNIEvex, have: []Path{AVX2, AVX512VNNI}, want: AVX2},
		{name: "neon-dp falls to neon", p: NEONDP, have: []Path{NEON}, want: NEON},
		{name: "no kernel", p: AVX2, have: []Path{NEON}, want: Go},
		{name: "go stays go", p: Go, have: []Path{AVX2, NEON}, want: Go},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Nearest(func(q Path) bool { return slices.Contains(tc.have, q) }); got != tc.want {
				t.Errorf("%v.Nearest(%v) = %v, want %v", tc.p, tc.have, got, tc.want)
			}
		})
	}
}

// TestResolve: Resolve gives every path its Nearest.
func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name string
		have []Path
	}{{"none", nil}, {"avx2", []Path{AVX2}}, {"avx2 and avx512vnni", []Path{AVX2, AVX512VNNI}}, {"neon", []Path{NEON}}} {
		t.Run(tc.name, func(t *testing.T) {
			at := Resolve(tc.have...)
			for p := range NumPaths {
				if want := p.Nearest(func(q Path) bool { return slices.Contains(tc.have, q) }); at[p] != want {
					t.Errorf("Resolve(%v)[%v] = %v, want %v", tc.have, p, at[p], want)
				}
			}
			if at[Go] != Go || (len(tc.have) > 0 && at[tc.have[0]] != tc.have[0]) {
				t.Errorf("Resolve(%v) = %v", tc.have, at)
			}
		})
	}
}
