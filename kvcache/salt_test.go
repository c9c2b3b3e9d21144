package kvcache

import (
	"testing"

	"ubatch/prefixhash"
)

// TestSaltsKeepPrefixesApart: a prompt computed under one salt is found again under that salt
// (full blocks and the kept or live partial block) and not at all under another salt or none,
// nor does a prompt of another salt wait for it; the Keys and routing roots follow the salt.
func TestSaltsKeepPrefixesApart(t *testing.T) {
	prompt := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20} // 2 full blocks of 4, then 3 cells
	a, b := NewSalt("tenant-a"), NewSalt("tenant-b")
	tests := []struct {
		name   string
		live   bool // seq 0 still running (its blocks live) rather than freed (cached)
		salt   Salt
		cached int
	}{
		{name: "same salt, cached", salt: a, cached: 10},
		{name: "other salt, cached", salt: b},
		{name: "no salt, cached", salt: Salt{}},
		{name: "same salt, live", live: true, salt: a, cached: 10},
		{name: "other salt, live", live: true, salt: b},
		{name: "no salt, live", live: true, salt: Salt{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var roots []uint64
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 16, MaxSeqs: 2, OnBlock: func(ev BlockEvent) {
				if ev.Kind == BlockStored && ev.Depth == 0 {
					roots = append(roots, ev.Root)
				}
			}})
			c.SetSpill(nil)
			if n, err := c.Admit(0, a, prompt, 0); err != nil || n != 0 {
				t.Fatalf("Admit = %d, %v", n, err)
			}
			if got := c.CanAdmit(tc.salt, prompt, 0); got.Wait != (tc.salt == a) {
				t.Fatalf("while seq 0 computes the prompt: Wait %v, want it for its salt only", got.Wait)
			}
			reserve(t, c, []int32{0}, 0, 0, prompt...)
			if len(roots) != 1 || roots[0] != prefixhash.Salted("tenant-a") {
				t.Fatalf("first block's routing roots %x, want the salt's %x", roots, prefixhash.Salted("tenant-a"))
			}
			if k, ok := c.BlockKey(c.Blocks(0)[1]); !ok || k != ChainKeysFrom(nil, a.Key, prompt, 4)[1] {
				t.Fatalf("block 1's Key is not the salted chain's")
			}
			if !tc.live {
				c.SeqFree(0)
			}
			got := c.CanAdmit(tc.salt, prompt, 0)
			if got.Cached != tc.cached || got.Wait {
				t.Fatalf("CanAdmit = %+v, want %d cached", got, tc.cached)
			}
			if n := len(c.Prefix(nil, tc.salt, prompt[:10])); n != map[bool]int{true: 3, false: 0}[tc.cached > 0] {
				t.Fatalf("Prefix found %d blocks", n)
			}
			if n, err := c.Admit(1, tc.salt, prompt, 0); err != nil || n != tc.cached {
				t.Fatalf("Admit = %d, %v; want %d", n, err, tc.cached)
			}
		})
	}
}

// TestImportSalted: blocks imported under a salt are found under it alone.
func TestImportSalted(t *testing.T) {
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	a := NewSalt("a")
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
	c.SetSpill(nil)
	imgs, held := c.Import(a, prompt[:8], []ImportBlock{{Depth: 0, Cells: 4}, {Depth: 1, Cells: 4}}, nil)
	if held != 8 || len(imgs) != 2 || imgs[0] < 0 || imgs[1] < 0 {
		t.Fatalf("Import = %v, %d", imgs, held)
	}
	for _, tc := range []struct {
		name string
		salt Salt
		want int
	}{{"same salt", a, 8}, {"other salt", NewSalt("b"), 0}, {"no salt", Salt{}, 0}} {
		if got := c.CanAdmit(tc.salt, prompt, 0).Cached; got != tc.want {
			t.Errorf("%s: %d cached, want %d", tc.name, got, tc.want)
		}
	}
	if _, held := c.Import(Salt{}, prompt[:8], []ImportBlock{{Depth: 0, Cells: 4}}, nil); held != 4 {
		t.Fatalf("an unsalted import of the same tokens holds %d, want its own 4", held)
	}
}

// TestSaltedAdmissionDoesNotAllocate: the salt's root is hashed on the stack, so checking a
// salted admission allocates nothing, as an unsalted one.
func TestSaltedAdmissionDoesNotAllocate(t *testing.T) {
	prompt := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18}
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 16, MaxSeqs: 2})
	a := NewSalt("a")
	if _, err := c.Admit(0, a, prompt, 0); err != nil {
		t.Fatal(err)
	}
	reserve(t, c, []int32{0}, 0, 0, prompt...)
	c.SeqFree(0)
	if n := testing.AllocsPerRun(100, func() { c.CanAdmit(a, prompt, 4) }); n != 0 {
		t.Fatalf("a salted CanAdmit allocates %v times", n)
	}
}
