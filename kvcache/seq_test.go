package kvcache

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"ubatch/quant"
)

// tenTokens makes seq hold positions 0..9 with tokens 10..19 and K = 100+pos, in blocks of 4.
func tenTokens(t *testing.T, c *Cache, seq int32) {
	t.Helper()
	reserve(t, c, []int32{seq}, 0, 100, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)
}

func positions(es []entry) []int32 {
	out := []int32{}
	for _, e := range es {
		out = append(out, e.Pos)
	}
	return out
}

func TestSeqRemoveRanges(t *testing.T) {
	all := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	tests := []struct {
		name       string
		p0, p1     int32
		wantPos    []int32
		wantCells  int
		wantBlocks int
	}{
		{name: "suffix open end", p0: 6, p1: -1, wantPos: all[:6], wantCells: 6, wantBlocks: 2},
		{name: "suffix past the end", p0: 6, p1: 10, wantPos: all[:6], wantCells: 6, wantBlocks: 2},
		{name: "suffix at block boundary", p0: 8, p1: -1, wantPos: all[:8], wantCells: 8, wantBlocks: 2},
		{name: "last only", p0: 9, p1: 10, wantPos: all[:9], wantCells: 9, wantBlocks: 3},
		{name: "middle is half-open", p0: 6, p1: 9, wantPos: []int32{0, 1, 2, 3, 4, 5, 9}, wantCells: 10, wantBlocks: 3},
		{name: "single middle", p0: 3, p1: 4, wantPos: []int32{0, 1, 2, 4, 5, 6, 7, 8, 9}, wantCells: 10, wantBlocks: 3},
		{name: "prefix", p0: 0, p1: 3, wantPos: all[3:], wantCells: 10, wantBlocks: 3},
		{name: "negative p0 means 0", p0: -7, p1: 3, wantPos: all[3:], wantCells: 10, wantBlocks: 3},
		{name: "everything", p0: -1, p1: -1, wantPos: []int32{}, wantCells: 0, wantBlocks: 0},
		{name: "empty range", p0: 5, p1: 5, wantPos: all, wantCells: 10, wantBlocks: 3},
		{name: "reversed range", p0: 7, p1: 3, wantPos: all, wantCells: 10, wantBlocks: 3},
		{name: "beyond the end", p0: 20, p1: 30, wantPos: all, wantCells: 10, wantBlocks: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 8})
			tenTokens(t, c, 0)
			before := visible(t, c, 0)
			if err := c.SeqRemove(0, tc.p0, tc.p1); err != nil {
				t.Fatal(err)
			}
			got := visible(t, c, 0)
			if !slices.Equal(positions(got), tc.wantPos) || c.SeqCells(0) != tc.wantCells || len(c.Blocks(0)) != tc.wantBlocks {
				t.Fatalf("positions %v cells %d blocks %d; want %v %d %d",
					positions(got), c.SeqCells(0), len(c.Blocks(0)), tc.wantPos, tc.wantCells, tc.wantBlocks)
			}
			for _, e := range got {
				if e != before[e.Pos] {
					t.Fatalf("kept cell changed: %v, was %v", e, before[e.Pos])
				}
			}
			wantMin, wantMax := int32(-1), int32(-1)
			if len(tc.wantPos) > 0 {
				wantMin, wantMax = tc.wantPos[0], tc.wantPos[len(tc.wantPos)-1]
			}
			if c.SeqPosMin(0) != wantMin || c.SeqPosMax(0) != wantMax {
				t.Fatalf("range [%d, %d], want [%d, %d]", c.SeqPosMin(0), c.SeqPosMax(0), wantMin, wantMax)
			}
			if c.Stats().Used != tc.wantBlocks {
				t.Fatalf("released blocks not returned: %+v", c.Stats())
			}
			checkInvariants(t, c)
			// Decoding continues after the last kept position.
			next := wantMax + 1
			if _, err := tryReserve(c, []int32{0}, next, 500, 77); err != nil {
				t.Fatalf("append at %d after removal: %v", next, err)
			}
			checkInvariants(t, c)
		})
	}
}

func TestSeqRemoveSharedNeverChangesOthers(t *testing.T) {
	tests := []struct {
		name       string
		p0, p1     int32
		wantCopies int // blocks added by copy-on-write
	}{
		{name: "suffix copies nothing", p0: 5, p1: -1, wantCopies: 0},
		{name: "middle in one block copies it", p0: 1, p1: 3, wantCopies: 1},
		{name: "middle over two blocks copies both", p0: 2, p1: 6, wantCopies: 2},
		{name: "whole sequence", p0: -1, p1: -1, wantCopies: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 8})
			tenTokens(t, c, 0)
			if err := c.SeqCopy(0, 1, -1, -1); err != nil {
				t.Fatal(err)
			}
			seq0 := visible(t, c, 0)
			used := c.Stats().Used
			if err := c.SeqRemove(1, tc.p0, tc.p1); err != nil {
				t.Fatal(err)
			}
			if got := visible(t, c, 0); !slices.Equal(got, seq0) {
				t.Fatalf("seq 0 changed: %v, was %v", got, seq0)
			}
			var want []int32
			for _, e := range seq0 {
				if !makeRange(tc.p0, tc.p1).has(e.Pos) {
					want = append(want, e.Pos)
				}
			}
			if got := positions(visible(t, c, 1)); !slices.Equal(got, append([]int32{}, want...)) {
				t.Fatalf("seq 1 positions %v, want %v", got, want)
			}
			if got := c.Stats().Used - used; got != tc.wantCopies {
				t.Fatalf("%d blocks added, want %d", got, tc.wantCopies)
			}
			checkInvariants(t, c)
		})
	}
}

func TestSeqRemoveAllSequences(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 16, MaxSeqs: 3})
	tenTokens(t, c, 0)
	if err := c.SeqCopy(0, 1, -1, -1); err != nil {
		t.Fatal(err)
	}
	reserve(t, c, []int32{2}, 0, 0, 1, 2, 3, 4, 5, 6)
	if err := c.SeqRemove(-1, 2, 5); err != nil {
		t.Fatal(err)
	}
	for s, want := range [][]int32{{0, 1, 5, 6, 7, 8, 9}, {0, 1, 5, 6, 7, 8, 9}, {0, 1, 5}} {
		if got := positions(visible(t, c, s)); !slices.Equal(got, want) {
			t.Fatalf("seq %d positions %v, want %v", s, got, want)
		}
	}
	// Seqs 0 and 1 shared the two touched blocks: one of them copied each, the other kept them.
	if st := c.Stats(); st.Used != 3+2+2 || st.Shared != 1 {
		t.Fatalf("stats %+v", st)
	}
	checkInvariants(t, c)
	if err := c.SeqRemove(3, -1, -1); err == nil || !strings.Contains(err.Error(), "sequence id 3") {
		t.Fatalf("SeqRemove of an unknown seq: %v", err)
	}
}

func TestSeqRemoveMiddleKVFull(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 3, MaxSeqs: 2})
	tenTokens(t, c, 0)
	if err := c.SeqCopy(0, 1, -1, -1); err != nil {
		t.Fatal(err)
	}
	before := takeSnapshot(c)
	if err := c.SeqRemove(1, 1, 2); !errors.Is(err, ErrKVFull) {
		t.Fatalf("middle removal in a shared block with no free block: %v, want ErrKVFull", err)
	}
	if !before.equal(takeSnapshot(c)) {
		t.Fatalf("failed SeqRemove changed the cache")
	}
	// A suffix removal needs no copy and works.
	if err := c.SeqRemove(1, 1, -1); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, c)
}

func TestSeqRemoveClearsHashes(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8})
	prompt := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
	tenTokens(t, c, 0)
	if got := c.MatchPrefix(prompt); got != 10 { // 2 hashed blocks, 2 cells of the live third
		t.Fatalf("MatchPrefix = %d, want 10", got)
	}
	if err := c.SeqRemove(0, 5, 6); err != nil {
		t.Fatal(err)
	}
	// Block 1 lost its hash; while seq 0 lives, its cell before the hole can still be copied.
	if got := c.MatchPrefix(prompt); got != 5 {
		t.Fatalf("after a hole in block 1, MatchPrefix = %d, want 5", got)
	}
	c.SeqFree(0)
	if got := c.MatchPrefix(prompt); got != 4 {
		t.Fatalf("after a hole in block 1 and a free, MatchPrefix = %d, want 4", got)
	}
}

func TestSeqCopy(t *testing.T) {
	tests := []struct {
		name      string
		src, dst  int
		p0, p1    int32
		wantPos   []int32 // dst's positions afterwards
		wantCells int
		wantNew   int // blocks allocated (copies of blocks holding cells outside the range)
		wantErr   string
	}{
		{name: "full", src: 0, dst: 1, p0: -1, p1: -1, wantPos: seqRange(10), wantCells: 10},
		{name: "prefix mid block", src: 0, dst: 1, p0: 0, p1: 6, wantPos: seqRange(6), wantCells: 6},
		{name: "prefix at block boundary", src: 0, dst: 1, p0: -1, p1: 8, wantPos: seqRange(8), wantCells: 8},
		{name: "p1 past the end", src: 0, dst: 1, p0: -1, p1: 99, wantPos: seqRange(10), wantCells: 10},
		{name: "nothing below p1", src: 0, dst: 1, p0: -1, p1: 0, wantPos: []int32{}, wantCells: 0},
		{name: "empty source", src: 2, dst: 1, p0: -1, p1: -1, wantPos: []int32{}, wantCells: 0},
		{name: "onto itself", src: 0, dst: 0, p0: -1, p1: -1, wantPos: seqRange(10), wantCells: 10},
		// Block 0 holds 0..2 outside the range: copied with them emptied; blocks 1 and 2 shared
		// (9 comes after the last cell copied, dst's length leaves it out).
		{name: "middle range", src: 0, dst: 1, p0: 3, p1: 9, wantPos: []int32{3, 4, 5, 6, 7, 8}, wantCells: 9, wantNew: 1},
		{name: "suffix", src: 0, dst: 1, p0: 3, p1: -1, wantPos: seqRange(10)[3:], wantCells: 10, wantNew: 1},
		// Block 0 has nothing in the range: skipped, block 1 shared as dst's first.
		{name: "whole middle block", src: 0, dst: 1, p0: 4, p1: 8, wantPos: []int32{4, 5, 6, 7}, wantCells: 4},
		{name: "range past the end", src: 0, dst: 1, p0: 20, p1: 30, wantPos: []int32{}, wantCells: 0},
		{name: "destination not empty", src: 1, dst: 0, p0: -1, p1: -1, wantErr: "destination sequence 0 is not empty"},
		{name: "src out of range", src: 3, dst: 1, p0: -1, p1: -1, wantErr: "must be in [0, 3)"},
		{name: "dst negative", src: 0, dst: -1, p0: -1, p1: -1, wantErr: "must be in [0, 3)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 3})
			tenTokens(t, c, 0)
			used := c.Stats().Used
			src := visible(t, c, tc.src)
			err := c.SeqCopy(tc.src, tc.dst, tc.p0, tc.p1)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := visible(t, c, tc.dst)
			if !slices.Equal(positions(got), tc.wantPos) || c.SeqCells(tc.dst) != tc.wantCells {
				t.Fatalf("dst positions %v cells %d, want %v %d", positions(got), c.SeqCells(tc.dst), tc.wantPos, tc.wantCells)
			}
			rg := makeRange(tc.p0, tc.p1)
			if want := slices.DeleteFunc(slices.Clone(src), func(e entry) bool { return !rg.has(e.Pos) }); tc.src != tc.dst && !slices.Equal(got, want) {
				t.Fatalf("dst sees %v, want %v", got, want)
			}
			if n := c.Stats().Used - used; n != tc.wantNew {
				t.Fatalf("SeqCopy allocated %d blocks, want %d", n, tc.wantNew)
			}
			checkInvariants(t, c)
		})
	}
}

// TestSeqCopyAfterShift copies positions below 10 of a sequence whose cells 2..3 were moved to
// 20..21: dst sees 0, 1, 4..9, in the source's order, sharing the blocks that hold none of 20, 21.
func TestSeqCopyAfterShift(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
	tenTokens(t, c, 0)
	if err := c.SeqShift(0, 2, 4, 18); err != nil {
		t.Fatal(err)
	}
	if err := c.SeqCopy(0, 1, -1, 10); err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(visible(t, c, 0), func(e entry) bool { return e.Pos >= 10 })
	if got := visible(t, c, 1); !slices.Equal(got, want) {
		t.Fatalf("dst sees %v, want %v", got, want)
	}
	if b0, b1 := c.Blocks(0), c.Blocks(1); b1[0] == b0[0] || b1[1] != b0[1] || b1[2] != b0[2] {
		t.Fatalf("tables %v and %v: want block 0 copied, 1 and 2 shared", b0, b1)
	}
	checkInvariants(t, c)
}

func TestSeqCopyKVFull(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 3, MaxSeqs: 2})
	tenTokens(t, c, 0) // all three blocks
	before := takeSnapshot(c)
	if err := c.SeqCopy(0, 1, 3, 9); !errors.Is(err, ErrKVFull) {
		t.Fatalf("error %v, want ErrKVFull", err)
	}
	if !before.equal(takeSnapshot(c)) {
		t.Fatal("a failed SeqCopy changed the cache")
	}
}

func TestSeqDiv(t *testing.T) {
	tests := []struct {
		name    string
		p0, p1  int32
		d       int32
		wantPos []int32
		wantErr string
	}{
		{name: "halve from 4", p0: 4, p1: -1, d: 2, wantPos: []int32{0, 1, 2, 3, 2, 2, 3, 3, 4, 4}},
		{name: "thirds of a middle range", p0: 3, p1: 7, d: 3, wantPos: []int32{0, 1, 2, 1, 1, 1, 2, 7, 8, 9}},
		{name: "by one", p0: -1, p1: -1, d: 1, wantPos: seqRange(10)},
		{name: "empty range", p0: 5, p1: 5, d: 2, wantPos: seqRange(10)},
		{name: "zero divisor", p0: -1, p1: -1, d: 0, wantErr: "divisor 0 must be positive"},
		{name: "negative divisor", p0: -1, p1: -1, d: -2, wantErr: "divisor -2 must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
			tenTokens(t, c, 0)
			before := visible(t, c, 0)
			err := c.SeqDiv(0, tc.p0, tc.p1, tc.d)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := visible(t, c, 0)
			if !slices.Equal(positions(got), tc.wantPos) {
				t.Fatalf("positions %v, want %v", positions(got), tc.wantPos)
			}
			for i, e := range got {
				// addShift moves K by the position change; tokens and V stay.
				if delta := e.Pos - before[i].Pos; e.K != before[i].K+float32(delta) || e.Tok != before[i].Tok || e.V != before[i].V {
					t.Fatalf("cell %d: %v, was %v", i, e, before[i])
				}
			}
			if c.SeqPosMax(0) != slices.Max(tc.wantPos) {
				t.Fatalf("SeqPosMax %d", c.SeqPosMax(0))
			}
			checkInvariants(t, c)
		})
	}
}

func TestSeqCopyPartialBlockThenDiverge(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 2})
	tenTokens(t, c, 0)
	seq0 := visible(t, c, 0)
	if err := c.SeqCopy(0, 1, -1, 6); err != nil {
		t.Fatal(err)
	}
	if c.Blocks(1)[1] != c.Blocks(0)[1] {
		t.Fatalf("the partial block must be shared, not copied")
	}
	// Seq 1 writes position 6 into the shared block: it must get its own copy, seq 0 keeps its 6..9.
	reserve(t, c, []int32{1}, 6, 900, 66, 67)
	if got := visible(t, c, 0); !slices.Equal(got, seq0) {
		t.Fatalf("seq 0 changed: %v", got)
	}
	want := append(slices.Clone(seq0[:6]), entry{6, 66, 900, -900}, entry{7, 67, 901, -901})
	if got := visible(t, c, 1); !slices.Equal(got, want) {
		t.Fatalf("seq 1 sees %v, want %v", got, want)
	}
	checkInvariants(t, c)
}

func TestSeqKeepAndFree(t *testing.T) {
	tests := []struct {
		name     string
		op       func(c *Cache)
		wantLens []int
	}{
		{name: "keep 1", op: func(c *Cache) { c.SeqKeep(1) }, wantLens: []int{0, 5, 0}},
		{name: "keep unknown drops all", op: func(c *Cache) { c.SeqKeep(7) }, wantLens: []int{0, 0, 0}},
		{name: "free 0", op: func(c *Cache) { c.SeqFree(0) }, wantLens: []int{0, 5, 7}},
		{name: "free all", op: func(c *Cache) { c.SeqFree(-1) }, wantLens: []int{0, 0, 0}},
		{name: "free unknown ignored", op: func(c *Cache) { c.SeqFree(3) }, wantLens: []int{10, 5, 7}},
		{name: "clear", op: func(c *Cache) { c.Clear() }, wantLens: []int{0, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 16, MaxSeqs: 3})
			tenTokens(t, c, 0)
			if err := c.SeqCopy(0, 1, -1, 5); err != nil {
				t.Fatal(err)
			}
			reserve(t, c, []int32{2}, 0, 0, 1, 2, 3, 4, 5, 6, 7)
			tc.op(c)
			for s, want := range tc.wantLens {
				if got := len(visible(t, c, s)); got != want || c.SeqCells(s) != want {
					t.Fatalf("seq %d has %d cells (SeqCells %d), want %d", s, got, c.SeqCells(s), want)
				}
			}
			checkInvariants(t, c)
		})
	}
}

type shiftCall struct {
	delta int32
	first float32
}

func TestSeqShift(t *testing.T) {
	tests := []struct {
		name    string
		p0, p1  int32
		delta   int32
		wantPos []int32
		// number of ShiftK calls (one per kept cell and layer)
		wantCalls int
	}{
		{name: "middle forward", p0: 4, p1: 8, delta: 3, wantPos: []int32{0, 1, 2, 3, 7, 8, 9, 10, 8, 9}, wantCalls: 4 * 2},
		{name: "suffix back", p0: 5, p1: -1, delta: -2, wantPos: []int32{0, 1, 2, 3, 4, 3, 4, 5, 6, 7}, wantCalls: 5 * 2},
		{name: "all back drops negatives", p0: -1, p1: -1, delta: -3, wantPos: []int32{0, 1, 2, 3, 4, 5, 6}, wantCalls: 7 * 2},
		{name: "half-open", p0: 9, p1: 10, delta: 5, wantPos: []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 14}, wantCalls: 2},
		{name: "zero delta", p0: -1, p1: -1, delta: 0, wantPos: seqRange(10), wantCalls: 0},
		{name: "empty range", p0: 4, p1: 4, delta: 9, wantPos: seqRange(10), wantCalls: 0},
		{name: "everything below zero", p0: -1, p1: -1, delta: -10, wantPos: []int32{}, wantCalls: 0},
	}
	for _, dt := range []quant.Type{quant.F32, quant.F16, quant.Q8_0} {
		kvDim := 3
		if dt == quant.Q8_0 {
			kvDim = 32
		}
		for _, tc := range tests {
			t.Run(dt.String()+"/"+tc.name, func(t *testing.T) {
				var calls []shiftCall
				shift := func(l int, k []float32, delta int32) {
					if len(k) != kvDim {
						t.Errorf("ShiftK got a row of %d values, want KVDim %d", len(k), kvDim)
					}
					calls = append(calls, shiftCall{delta, k[0]})
					addShift(l, k, delta)
				}
				c := newCacheShift(t, Config{BlockSize: 4, NumBlocks: 8, DType: dt}, shift)
				tenTokens(t, c, 0)
				before := visible(t, c, 0)
				if err := c.SeqShift(0, tc.p0, tc.p1, tc.delta); err != nil {
					t.Fatal(err)
				}
				got := visible(t, c, 0)
				if !slices.Equal(positions(got), tc.wantPos) {
					t.Fatalf("positions %v, want %v", positions(got), tc.wantPos)
				}
				if len(calls) != tc.wantCalls {
					t.Fatalf("%d ShiftK calls, want %d", len(calls), tc.wantCalls)
				}
				for _, cl := range calls {
					if cl.delta != tc.delta {
						t.Fatalf("ShiftK delta %d, want %d", cl.delta, tc.delta)
					}
				}
				// Kept cells keep their token and V; K moved by exactly delta when shifted.
				r := makeRange(tc.p0, tc.p1)
				j := 0
				for _, e := range before {
					np := e.Pos
					k := e.K
					if r.has(e.Pos) {
						np += tc.delta
						k += float32(tc.delta)
					}
					if np < 0 {
						continue
					}
					want := entry{Pos: np, Tok: e.Tok, K: k, V: e.V}
					if dt == quant.Q8_0 && math.Abs(float64(got[j].K-k)) <= math.Abs(float64(k))/200 {
						// Requantized to 8 bits: d = amax/127 rounded to half, q = 127.
						got[j].K = k
					}
					if got[j] != want {
						t.Fatalf("cell %d: %v, want %v", j, got[j], want)
					}
					j++
				}
				checkInvariants(t, c)
			})
		}
	}
}

func TestSeqShiftSharedAndErrors(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 4, MaxSeqs: 2})
	tenTokens(t, c, 0)
	if err := c.SeqCopy(0, 1, -1, -1); err != nil {
		t.Fatal(err)
	}
	seq0 := visible(t, c, 0)
	before := takeSnapshot(c)
	// Shifting every cell of seq 1 needs copies of its 3 shared blocks; only 1 is free.
	if err := c.SeqShift(1, -1, -1, 4); !errors.Is(err, ErrKVFull) {
		t.Fatalf("error %v, want ErrKVFull", err)
	}
	if !before.equal(takeSnapshot(c)) {
		t.Fatalf("failed SeqShift changed the cache")
	}
	if err := c.SeqShift(1, 8, -1, 4); err != nil {
		t.Fatal(err)
	}
	if got := visible(t, c, 0); !slices.Equal(got, seq0) {
		t.Fatalf("shifting seq 1 changed seq 0: %v", got)
	}
	if got := positions(visible(t, c, 1)); !slices.Equal(got, []int32{0, 1, 2, 3, 4, 5, 6, 7, 12, 13}) {
		t.Fatalf("seq 1 positions %v", got)
	}
	if c.SeqPosMax(1) != 13 {
		t.Fatalf("SeqPosMax %d", c.SeqPosMax(1))
	}
	reserve(t, c, []int32{1}, 14, 0, 5) // decoding continues after the shifted end
	checkInvariants(t, c)

	tests := []struct {
		name    string
		c       *Cache
		seq     int
		p0, p1  int32
		delta   int32
		wantErr string
	}{
		{name: "negative seq", c: c, seq: -1, delta: 1, wantErr: "sequence id -1"},
		{name: "seq too large", c: c, seq: 2, delta: 1, wantErr: "sequence id 2"},
		{name: "overflow", c: c, seq: 0, p0: 9, p1: 10, delta: 1<<31 - 5, wantErr: "overflows"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.c.SeqShift(tc.seq, tc.p0, tc.p1, tc.delta); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestSeqShiftClearsHashes(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8})
	tenTokens(t, c, 0)
	if err := c.SeqShift(0, 4, 5, 1); err != nil {
		t.Fatal(err)
	}
	if got := c.MatchPrefix([]int32{10, 11, 12, 13, 14, 15, 16, 17}); got != 4 {
		t.Fatalf("MatchPrefix after shifting block 1 = %d, want 4", got)
	}
}
