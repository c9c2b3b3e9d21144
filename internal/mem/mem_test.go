package mem

import (
	"os"
	"testing"
)

func TestAllocFree(t *testing.T) {
	for _, n := range []int{0, 1, 1 << 20} {
		b, err := Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n {
			t.Fatalf("Alloc(%d) has %d bytes", n, len(b))
		}
		for i := range b {
			if b[i] != 0 {
				t.Fatalf("Alloc(%d)[%d] = %d, not zeroed", n, i, b[i])
			}
		}
		if n > 0 {
			b[n-1] = 1
		}
		if err := Free(b); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPageRange(t *testing.T) {
	page := os.Getpagesize()
	b, err := Alloc(4 * page)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(b)
	cases := []struct {
		name           string
		from, to       int
		wantLo, wantHi int
	}{
		{"whole pages", 0, 4 * page, 0, 4 * page},
		{"unaligned ends", 10, 3*page + 5, page - 10, 3*page - 10},
		{"inside one page", 10, 100, 0, 0},
		{"empty", 0, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lo, hi := pageRange(b[c.from:c.to])
			if lo != c.wantLo || hi != c.wantHi {
				t.Fatalf("pageRange = [%d, %d), want [%d, %d)", lo, hi, c.wantLo, c.wantHi)
			}
		})
	}
}
