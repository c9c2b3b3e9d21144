package cpu

import (
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
