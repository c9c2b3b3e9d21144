package kvcache

import (
	"errors"
	"slices"
	"testing"

	"ubatch/quant"
)

// TestSeqDiscard runs context shifts on a 10-token sequence (blocks of 4, K = 100+position): the
// survivors, at their new positions with keys moved by exactly -d (addShift), are compacted into
// whole blocks and the rest released.
func TestSeqDiscard(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T, c *Cache) // after tenTokens(seq 0)
		p0, p1 int32
		want   []entry // what seq 0 sees afterwards
		blocks int     // its table length afterwards
		calls  int     // ShiftK calls: rotated cells x 2 layers
	}{
		{name: "older half after the first token", p0: 1, p1: 5,
			want: discarded(seqRange(10), 1, 5), blocks: 2, calls: 5 * 2},
		{name: "from the start", p0: 0, p1: 4, want: discarded(seqRange(10), 0, 4), blocks: 2, calls: 6 * 2},
		{name: "whole middle block", p0: 4, p1: 8, want: discarded(seqRange(10), 4, 8), blocks: 2, calls: 2 * 2},
		{name: "one cell at a block's end", p0: 3, p1: 4, want: discarded(seqRange(10), 3, 4), blocks: 3, calls: 6 * 2},
		{name: "past the end: a removal", p0: 6, p1: 100, want: discarded(seqRange(10), 6, 100), blocks: 2},
		{name: "nothing in range", p0: 20, p1: 30, want: discarded(seqRange(10), 20, 30), blocks: 3},
		{name: "holes before the range are compacted too", p0: 6, p1: 8,
			setup: func(t *testing.T, c *Cache) {
				if err := c.SeqRemove(0, 1, 2); err != nil {
					t.Fatal(err)
				}
			},
			want: discarded([]int32{0, 2, 3, 4, 5, 6, 7, 8, 9}, 6, 8), blocks: 2, calls: 2 * 2},
	}
	for _, dt := range []quant.Type{quant.F32, quant.F16} {
		for _, tc := range tests {
			t.Run(dt.String()+"/"+tc.name, func(t *testing.T) {
				calls := 0
				shift := func(l int, k []float32, delta int32) { calls++; addShift(l, k, delta) }
				c := newCacheShift(t, Config{BlockSize: 4, NumBlocks: 8, DType: dt}, shift)
				tenTokens(t, c, 0)
				if tc.setup != nil {
					tc.setup(t, c)
				}
				if err := c.SeqDiscard(0, tc.p0, tc.p1); err != nil {
					t.Fatal(err)
				}
				if got := visible(t, c, 0); !slices.Equal(got, tc.want) {
					t.Fatalf("sees\n  %v\nwant\n  %v", got, tc.want)
				}
				if n := len(c.Blocks(0)); n != tc.blocks || c.SeqCells(0) != len(tc.want) {
					t.Fatalf("%d blocks, %d cells; want %d blocks, %d cells (no holes)", n, c.SeqCells(0), tc.blocks, len(tc.want))
				}
				if st := c.Stats(); st.Used != tc.blocks {
					t.Fatalf("%d blocks in use, want %d: %+v", st.Used, tc.blocks, st)
				}
				if calls != tc.calls {
					t.Fatalf("%d ShiftK calls, want %d", calls, tc.calls)
				}
				checkInvariants(t, c)
			})
		}
	}
}

// discarded is what tenTokens' sequence (token 10+p, K 100+p at slot p) sees after
// SeqDiscard(p0, p1) when it held positions ps, in order.
func discarded(ps []int32, p0, p1 int32) []entry {
	var out []entry
	for _, p := range ps {
		k := float32(100 + p)
		e := entry{Pos: p, Tok: 10 + p, K: k, V: -k}
		switch {
		case p >= p0 && p < p1:
			continue
		case p >= p1:
			e.Pos -= p1 - p0
			e.K -= float32(p1 - p0)
		}
		out = append(out, e)
	}
	return out
}

// TestSeqDiscardShared: a sequence sharing every block with another is compacted into blocks
// of its own (the other sees exactly what it saw), and refused with ErrKVFull, nothing changed,
// when those blocks are not there.
func TestSeqDiscardShared(t *testing.T) {
	tests := []struct {
		name      string
		numBlocks int
		wantErr   bool
	}{
		{name: "room for the copies", numBlocks: 8},
		{name: "no room", numBlocks: 4, wantErr: true}, // 3 shared + 1 free; 2 copies needed
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: tc.numBlocks, MaxSeqs: 2})
			tenTokens(t, c, 0)
			if err := c.SeqCopy(0, 1, -1, -1); err != nil {
				t.Fatal(err)
			}
			other := visible(t, c, 1)
			before := takeSnapshot(c)
			err := c.SeqDiscard(0, 1, 5)
			if tc.wantErr {
				if !errors.Is(err, ErrKVFull) || !before.equal(takeSnapshot(c)) {
					t.Fatalf("SeqDiscard = %v (changed: %v), want ErrKVFull and no change", err, !before.equal(takeSnapshot(c)))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := visible(t, c, 1); !slices.Equal(got, other) {
				t.Fatalf("the other sequence sees %v, want %v", got, other)
			}
			if got, want := visible(t, c, 0), discarded(seqRange(10), 1, 5); !slices.Equal(got, want) {
				t.Fatalf("sees %v, want %v", got, want)
			}
			if st := c.Stats(); st.Used != 3+2 {
				t.Fatalf("%+v, want 3 shared blocks and 2 of seq 0's own", st)
			}
			checkInvariants(t, c)
		})
	}
}

// TestSeqDiscardHashes: untouched full blocks keep their hashes (and stay cached when
// released); blocks written by the compaction hold re-rotated keys and are never matched.
func TestSeqDiscardHashes(t *testing.T) {
	ten := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
	tests := []struct {
		name   string
		p0, p1 int32
		query  []int32
		want   int // MatchPrefix(query) after the sequence is freed
	}{
		{name: "blocks before the range kept", p0: 8, p1: 9, query: ten, want: 8},
		{name: "every block rewritten", p0: 0, p1: 1, query: ten[1:], want: 0},
		{name: "the compacted history is not offered", p0: 1, p1: 5, query: []int32{10, 15, 16, 17, 18, 19}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 8})
			tenTokens(t, c, 0)
			if err := c.SeqDiscard(0, tc.p0, tc.p1); err != nil {
				t.Fatal(err)
			}
			c.SeqFree(0)
			if got := c.MatchPrefix(tc.query); got != tc.want {
				t.Fatalf("MatchPrefix = %d, want %d", got, tc.want)
			}
			checkInvariants(t, c)
		})
	}
}

func TestSeqDiscardErrors(t *testing.T) {
	tests := []struct {
		name   string
		shift  bool
		seq    int
		p0, p1 int32
	}{
		{name: "negative seq", shift: true, seq: -1, p0: 1, p1: 2},
		{name: "seq too large", shift: true, seq: 4, p0: 1, p1: 2},
		{name: "empty range", shift: true, seq: 0, p0: 2, p1: 2},
		{name: "negative start", shift: true, seq: 0, p0: -1, p1: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{BlockSize: 4, NumBlocks: 8}
			c := newCache(t, cfg)
			tenTokens(t, c, 0)
			before := takeSnapshot(c)
			if err := c.SeqDiscard(tc.seq, tc.p0, tc.p1); err == nil || errors.Is(err, ErrKVFull) {
				t.Fatalf("SeqDiscard = %v, want a validation error", err)
			}
			if !before.equal(takeSnapshot(c)) {
				t.Fatal("a refused SeqDiscard changed the cache")
			}
		})
	}
}
