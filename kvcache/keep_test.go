package kvcache

import (
	"slices"
	"testing"

	"ubatch/quant"
)

// TestKeptPartialBlocks checks which last blocks of freed sequences stay matchable, with blocks of
// 4 and a 10-token history (two full blocks and 2 cells of a third) unless a case says otherwise.
func TestKeptPartialBlocks(t *testing.T) {
	ten := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
	tests := []struct {
		name      string
		numBlocks int
		setup     func(t *testing.T, c *Cache) // leaves every sequence freed
		query     []int32
		want      int // MatchPrefix(query)
		cached    int // Stats().Cached after setup
	}{
		{name: "kept after free", setup: func(t *testing.T, c *Cache) {
			tenTokens(t, c, 0)
			c.SeqFree(0)
		}, query: ten, want: 10, cached: 3},
		{name: "a longer prompt copies its cells", setup: func(t *testing.T, c *Cache) {
			tenTokens(t, c, 0)
			c.SeqFree(0)
		}, query: append(slices.Clone(ten), 20, 21), want: 10, cached: 3},
		{name: "a prompt parting inside it", setup: func(t *testing.T, c *Cache) {
			tenTokens(t, c, 0)
			c.SeqFree(0)
		}, query: []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 99}, want: 9, cached: 3},
		{name: "a first block kept", setup: func(t *testing.T, c *Cache) {
			reserve(t, c, []int32{0}, 0, 0, 10, 11, 12)
			c.SeqFree(0)
		}, query: ten[:3], want: 3, cached: 1},
		{name: "shared: kept when the last holder frees it", setup: func(t *testing.T, c *Cache) {
			tenTokens(t, c, 0)
			if err := c.SeqCopy(0, 1, -1, -1); err != nil {
				t.Fatal(err)
			}
			c.SeqFree(0)
			if st := c.Stats(); st.Cached != 0 {
				t.Fatalf("a block still held by seq 1 was cached: %+v", st)
			}
			c.SeqFree(1)
		}, query: ten, want: 10, cached: 3},
		{name: "keys re-rotated there and back", setup: func(t *testing.T, c *Cache) {
			tenTokens(t, c, 0)
			// Positions end canonical, but the keys were rotated twice (in F16, not exactly
			// what a fresh decode computes): stale, never kept.
			if err := c.SeqShift(0, 8, -1, 1); err != nil {
				t.Fatal(err)
			}
			if err := c.SeqShift(0, 9, -1, -1); err != nil {
				t.Fatal(err)
			}
			c.SeqFree(0)
		}, query: ten, want: 8, cached: 2},
		{name: "forward pass failed", setup: func(t *testing.T, c *Cache) {
			cells := reserve(t, c, []int32{0}, 0, 100, ten...)
			c.ForgetCells(cells[8:])
			c.SeqFree(0)
		}, query: ten, want: 8, cached: 2},
		{name: "written after an earlier cell was removed", setup: func(t *testing.T, c *Cache) {
			// Seq 1 keeps the canonical first two blocks; seq 0 loses cell 1 (its first block
			// is copied, unhashed, the second stays shared and hashed), then computes 18 and 19
			// without it. Their block must not be chained to the second block's hash.
			reserve(t, c, []int32{0}, 0, 100, ten[:8]...)
			if err := c.SeqCopy(0, 1, -1, -1); err != nil {
				t.Fatal(err)
			}
			if err := c.SeqRemove(0, 1, 2); err != nil {
				t.Fatal(err)
			}
			reserve(t, c, []int32{0}, 8, 500, 18, 19)
			c.SeqFree(1)
			c.SeqFree(0)
		}, query: ten, want: 8, cached: 2},
		{name: "a holey last block", setup: func(t *testing.T, c *Cache) {
			tenTokens(t, c, 0)
			if err := c.SeqRemove(0, 8, 9); err != nil {
				t.Fatal(err)
			}
			c.SeqFree(0)
		}, query: ten, want: 8, cached: 2},
		{name: "identical copies kept once", setup: func(t *testing.T, c *Cache) {
			tenTokens(t, c, 0)
			tenTokens(t, c, 1)
			c.SeqFree(0)
			c.SeqFree(1)
		}, query: ten, want: 10, cached: 3},
		{name: "a shorter copy gives way to a longer one", setup: func(t *testing.T, c *Cache) {
			reserve(t, c, []int32{0}, 0, 100, ten[:9]...)
			c.SeqFree(0)
			tenTokens(t, c, 1)
			c.SeqFree(1)
		}, query: ten, want: 10, cached: 3},
		{name: "a shorter copy is not kept beside a longer one", setup: func(t *testing.T, c *Cache) {
			tenTokens(t, c, 1)
			c.SeqFree(1)
			reserve(t, c, []int32{0}, 0, 100, ten[:9]...)
			c.SeqFree(0)
		}, query: ten, want: 10, cached: 3},
		{name: "evicted first, before its parents", numBlocks: 4, setup: func(t *testing.T, c *Cache) {
			tenTokens(t, c, 0)
			c.SeqFree(0)
			reserve(t, c, []int32{1}, 0, 0, 50, 51, 52, 53, 54) // needs two blocks: one free, one evicted
			c.SeqFree(1)
		}, query: ten, want: 8, cached: 4},
		{name: "cleared", setup: func(t *testing.T, c *Cache) {
			tenTokens(t, c, 0)
			c.SeqFree(0)
			c.Clear()
		}, query: ten, want: 0, cached: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nb := tc.numBlocks
			if nb == 0 {
				nb = 8
			}
			c := newCache(t, Config{BlockSize: 4, NumBlocks: nb, MaxSeqs: 2, DType: quant.F16})
			tc.setup(t, c)
			checkInvariants(t, c)
			if st := c.Stats(); st.Used != 0 || st.Cached != tc.cached {
				t.Fatalf("after setup: %+v, want %d cached", st, tc.cached)
			}
			if got := c.MatchPrefix(tc.query); got != tc.want {
				t.Fatalf("MatchPrefix = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestKeptPartialBlockCopied attaches a turn that continues a freed sequence: the kept block's
// cells are copied (K, V, tokens, positions) into a block of the new sequence's own, the kept
// block stays cached for the next one, and decoding goes on after the copied cells.
func TestKeptPartialBlockCopied(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
	tenTokens(t, c, 0)
	orig := visible(t, c, 0)
	c.SeqFree(0)
	for round := range 3 {
		seq := round % 2
		n, err := c.Admit(seq, Salt{}, append(slices.Clone(orig2toks(orig)), 20), 2)
		if err != nil || n != 10 {
			t.Fatalf("round %d: Admit = %d, %v; want 10", round, n, err)
		}
		if got := visible(t, c, seq); !slices.Equal(got, orig) {
			t.Fatalf("round %d: attached %v, want %v", round, got, orig)
		}
		if own := c.Blocks(seq)[2]; c.ref[own] != 1 || c.part[own] != 0 {
			t.Fatalf("round %d: the copy is block %d (ref %d, kept %d)", round, own, c.ref[own], c.part[own])
		}
		reserve(t, c, []int32{int32(seq)}, 10, 900, 20)
		checkInvariants(t, c)
		c.SeqRemove(seq, 10, -1) // the next round's prompt ends at the same place
		c.SeqFree(seq)
		if st := c.Stats(); st.Cached != 3 {
			t.Fatalf("round %d: %+v, want the two full blocks and one kept", round, st)
		}
	}
}

func orig2toks(es []entry) []int32 {
	var toks []int32
	for _, e := range es {
		toks = append(toks, e.Tok)
	}
	return toks
}
