package kvcache

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"ubatch/kvformat"
	"ubatch/quant"
)

func TestNewValidation(t *testing.T) {
	ok := Config{NLayers: 2, KVDim: 4, BlockSize: 16, NumBlocks: 8, MaxSeqs: 2}
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{name: "valid", mod: func(*Config) {}},
		{name: "default block size", mod: func(c *Config) { c.BlockSize = 0 }},
		{name: "f16", mod: func(c *Config) { c.DType = quant.F16 }},
		{name: "no layers", mod: func(c *Config) { c.NLayers = 0 }, wantErr: "NLayers"},
		{name: "no kv dim", mod: func(c *Config) { c.KVDim = -1 }, wantErr: "KVDim"},
		{name: "negative block size", mod: func(c *Config) { c.BlockSize = -16 }, wantErr: "BlockSize"},
		{name: "no blocks", mod: func(c *Config) { c.NumBlocks = 0 }, wantErr: "NumBlocks"},
		{name: "no seqs", mod: func(c *Config) { c.MaxSeqs = 0 }, wantErr: "MaxSeqs"},
		{name: "bad dtype", mod: func(c *Config) { c.DType = 7 }, wantErr: "DType"},
		{name: "q8_0", mod: func(c *Config) { c.DType, c.KVDim = quant.Q8_0, 64 }},
		{name: "q8_0 width not a multiple of 32", mod: func(c *Config) { c.DType, c.KVDim = quant.Q8_0, 40 }, wantErr: "multiple of 32"},
		{name: "per-layer widths", mod: func(c *Config) { c.KVDims = []int{4, 2} }},
		{name: "per-layer widths of the wrong count", mod: func(c *Config) { c.KVDims = []int{4} }, wantErr: "KVDims"},
		{name: "a per-layer width past KVDim", mod: func(c *Config) { c.KVDims = []int{4, 8} }, wantErr: "layer 1"},
		{name: "a per-layer width of 0", mod: func(c *Config) { c.KVDims = []int{0, 4} }, wantErr: "layer 0"},
		{name: "q8_0 per-layer width not a multiple of 32", mod: func(c *Config) { c.DType, c.KVDim, c.KVDims = quant.Q8_0, 64, []int{64, 48} }, wantErr: "layer 1"},
		{name: "cell index overflow", mod: func(c *Config) { c.NumBlocks, c.BlockSize = 1<<27, 32 }, wantErr: "int32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.mod(&cfg)
			c, err := New(cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New error = %v, want it to mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if c.Config().BlockSize != max(cfg.BlockSize, DefaultBlockSize) {
				t.Fatalf("BlockSize %d", c.Config().BlockSize)
			}
			st := c.Stats()
			if st.Total != cfg.NumBlocks || st.Free != cfg.NumBlocks || st.Used+st.Cached+st.UsedCells != 0 {
				t.Fatalf("fresh cache stats %+v", st)
			}
		})
	}
}

func TestStorageAccessors(t *testing.T) {
	tests := []struct {
		name  string
		dtype quant.Type
	}{
		{name: "f32", dtype: quant.F32},
		{name: "f16", dtype: quant.F16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{NLayers: 3, KVDim: 5, BlockSize: 4, NumBlocks: 6, DType: tc.dtype})
			want := 6 * 4 * 5
			for l := range 3 {
				f32 := len(c.KF32(l)) == want && len(c.VF32(l)) == want
				f16 := len(c.KF16(l)) == want && len(c.VF16(l)) == want
				if f32 != (tc.dtype == quant.F32) || f16 != (tc.dtype == quant.F16) {
					t.Fatalf("layer %d: F32 accessors %v, F16 accessors %v", l, f32, f16)
				}
				if (c.KF32(l) == nil) != (tc.dtype != quant.F32) || (c.KF16(l) == nil) != (tc.dtype != quant.F16) {
					t.Fatalf("layer %d: the accessors of the other dtype must return nil", l)
				}
			}
			if c.KQ8(0) != nil || c.VQ8(0) != nil || c.RowBytes() != int(kvformat.RowBytes(tc.dtype, 5)) {
				t.Fatalf("Q8_0 accessors must return nil for %v; RowBytes %d", tc.dtype, c.RowBytes())
			}
			if c.KF32(3) != nil || c.VF16(-1) != nil || c.KQ8(3) != nil || c.VQ8(-1) != nil {
				t.Fatalf("out-of-range layer must give nil")
			}
			if c.Pos(-1) != -1 || c.Pos(1000) != -1 || c.Token(1000) != -1 || c.Blocks(9) != nil ||
				c.SeqCells(-1) != 0 || c.SeqPosMax(9) != -1 || c.SeqPosMin(-2) != -1 {
				t.Fatalf("out-of-range reads must return empty values")
			}
		})
	}
}

func TestReserveAppendsAndHashesFullBlocks(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8})
	cells := reserve(t, c, []int32{0}, 0, 100, 10, 11, 12, 13, 14, 15)
	if len(c.Blocks(0)) != 2 || c.SeqCells(0) != 6 || c.SeqPosMin(0) != 0 || c.SeqPosMax(0) != 5 {
		t.Fatalf("blocks %v cells %d range [%d, %d]", c.Blocks(0), c.SeqCells(0), c.SeqPosMin(0), c.SeqPosMax(0))
	}
	b := c.Blocks(0)
	for i, cell := range cells {
		if want := b[i/4]*4 + int32(i%4); cell != want {
			t.Fatalf("token %d got cell %d, want %d (block table %v)", i, cell, want, b)
		}
		if c.Pos(cell) != int32(i) || c.Token(cell) != int32(10+i) {
			t.Fatalf("cell %d: pos %d tok %d", cell, c.Pos(cell), c.Token(cell))
		}
	}
	if !c.hashed[b[0]] || !c.index.is[b[0]] || c.hashed[b[1]] {
		t.Fatalf("the full block must be hashed and indexed, the partial one not")
	}
	st := c.Stats()
	if st.Used != 2 || st.Free != 6 || st.UsedCells != 6 || st.Shared != 0 {
		t.Fatalf("stats %+v", st)
	}
	checkInvariants(t, c)
}

func TestReserveValidation(t *testing.T) {
	// State: seq 0 has positions 0..4 (tokens 1..5), seq 1 is a full copy of it, seq 2 has its own
	// position 0, seq 3 is empty.
	setup := func(t *testing.T) *Cache {
		c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 4})
		reserve(t, c, []int32{0}, 0, 0, 1, 2, 3, 4, 5)
		if err := c.SeqCopy(0, 1, -1, -1); err != nil {
			t.Fatal(err)
		}
		reserve(t, c, []int32{2}, 0, 0, 9)
		return c
	}
	tests := []struct {
		name    string
		tokens  []int32
		pos     []int32
		seqs    [][]int32
		cells   int
		wantErr string
	}{
		{name: "continue one", tokens: []int32{6}, pos: []int32{5}, seqs: [][]int32{{0}}},
		{name: "continue shared", tokens: []int32{6, 7}, pos: []int32{5, 6}, seqs: [][]int32{{0, 1}, {1, 0}}},
		{name: "shared then diverge at a block boundary", tokens: []int32{6, 7, 8, 9, 9}, pos: []int32{5, 6, 7, 8, 8},
			seqs: [][]int32{{0, 1}, {0, 1}, {0, 1}, {0}, {1}}},
		{name: "diverge before this batch's tokens", tokens: []int32{6, 7}, pos: []int32{5, 5}, seqs: [][]int32{{0}, {1}}},
		{name: "diverge inside a block written in this batch", tokens: []int32{6, 7, 8}, pos: []int32{5, 6, 6},
			seqs: [][]int32{{0, 1}, {0}, {1}}, wantErr: "token 1: sequence 0 diverges"},
		{name: "diverge inside a block made in this batch", tokens: []int32{6, 7, 8, 9, 9}, pos: []int32{5, 6, 7, 8, 9},
			seqs: [][]int32{{0, 1}, {0, 1}, {0, 1}, {0, 1}, {1}}, wantErr: "token 4: sequence 1 diverges"},
		{name: "empty seq any start", tokens: []int32{6}, pos: []int32{42}, seqs: [][]int32{{3}}},
		{name: "empty micro-batch", tokens: nil, pos: nil, seqs: nil},
		{name: "tokens pos mismatch", tokens: []int32{6}, pos: []int32{5, 6}, seqs: [][]int32{{0}, {0}}, wantErr: "1 tokens but 2 positions"},
		{name: "seqs mismatch", tokens: []int32{6}, pos: []int32{5}, seqs: nil, wantErr: "sequence lists"},
		{name: "cells too short", tokens: []int32{6, 7}, pos: []int32{5, 6}, seqs: [][]int32{{0}, {0}}, cells: 1, wantErr: "cells has room"},
		{name: "no seq", tokens: []int32{6}, pos: []int32{5}, seqs: [][]int32{{}}, wantErr: "token 0: no sequence id"},
		{name: "negative pos", tokens: []int32{6}, pos: []int32{-1}, seqs: [][]int32{{3}}, wantErr: "negative position"},
		{name: "seq out of range", tokens: []int32{6, 7}, pos: []int32{5, 0}, seqs: [][]int32{{0}, {4}}, wantErr: "token 1: sequence id 4 outside"},
		{name: "negative seq", tokens: []int32{6}, pos: []int32{5}, seqs: [][]int32{{-1}}, wantErr: "sequence id -1 outside"},
		{name: "duplicate seq", tokens: []int32{6}, pos: []int32{5}, seqs: [][]int32{{0, 1, 0}}, wantErr: "listed twice"},
		{name: "gap", tokens: []int32{6}, pos: []int32{6}, seqs: [][]int32{{0}}, wantErr: "position 6 does not follow position 4"},
		{name: "repeat position", tokens: []int32{6}, pos: []int32{4}, seqs: [][]int32{{0}}, wantErr: "does not follow"},
		{name: "gap within batch", tokens: []int32{6, 7}, pos: []int32{5, 7}, seqs: [][]int32{{0}, {0}}, wantErr: "token 1: position 7"},
		{name: "different histories", tokens: []int32{6}, pos: []int32{5}, seqs: [][]int32{{0, 2}}, wantErr: "do not share"},
		{name: "empty with non-empty", tokens: []int32{6}, pos: []int32{5}, seqs: [][]int32{{0, 3}}, wantErr: "do not share"},
		{name: "diverged in batch", tokens: []int32{6, 7}, pos: []int32{5, 6}, seqs: [][]int32{{0}, {0, 1}}, wantErr: "token 1: sequences 0 and 1 do not share"},
		{name: "same length different blocks", tokens: []int32{6, 7}, pos: []int32{0, 1}, seqs: [][]int32{{3}, {3, 2}},
			wantErr: "do not share"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := setup(t)
			before := takeSnapshot(c)
			n := len(tc.tokens)
			if tc.cells != 0 {
				n = tc.cells
			}
			cells := make([]int32, n)
			can := c.CanReserve(tc.pos, tc.seqs)
			checkErr := c.CheckReserve(tc.pos, tc.seqs)
			if can != (checkErr == nil) {
				t.Fatalf("CanReserve %v but CheckReserve %v", can, checkErr)
			}
			err := c.Reserve(tc.tokens, tc.pos, tc.seqs, cells)
			if checkErr != nil && (err == nil || err.Error() != checkErr.Error()) {
				t.Fatalf("CheckReserve says %v, Reserve %v", checkErr, err)
			}
			if tc.wantErr == "" {
				if err != nil || !can {
					t.Fatalf("Reserve: %v (CanReserve %v)", err, can)
				}
				checkInvariants(t, c)
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Reserve error = %v, want it to contain %q", err, tc.wantErr)
			}
			if errors.Is(err, ErrKVFull) {
				t.Fatalf("validation error must not be ErrKVFull: %v", err)
			}
			if can && !strings.Contains(tc.wantErr, "cells") && !strings.Contains(tc.wantErr, "tokens but") {
				t.Fatalf("CanReserve true for an invalid batch")
			}
			if !before.equal(takeSnapshot(c)) {
				t.Fatalf("failed Reserve changed the cache")
			}
		})
	}
}

func TestReserveSharedTokenOneCell(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 3})
	cells := reserve(t, c, []int32{0, 1, 2}, 0, 0, 1, 2, 3, 4, 5)
	for s := range 3 {
		if !slices.Equal(c.Blocks(s), c.Blocks(0)) || c.SeqCells(s) != 5 {
			t.Fatalf("seq %d: table %v len %d, want seq 0's %v", s, c.Blocks(s), c.SeqCells(s), c.Blocks(0))
		}
	}
	st := c.Stats()
	if st.Used != 2 || st.Shared != 2 || st.UsedCells != 5 {
		t.Fatalf("stats %+v", st)
	}
	if c.ref[c.Blocks(0)[0]] != 3 {
		t.Fatalf("refcount %d, want 3", c.ref[c.Blocks(0)[0]])
	}
	if cells[4] != c.Blocks(0)[1]*4 {
		t.Fatalf("fifth token in cell %d", cells[4])
	}
	checkInvariants(t, c)
}

// TestStorageQ8 checks the Q8_0 layout: per layer, one row of KVDim/32 blocks of 34 bytes per
// cell, half the bytes of F16 plus the scales.
func TestStorageQ8(t *testing.T) {
	c := newCache(t, Config{NLayers: 3, KVDim: 64, BlockSize: 4, NumBlocks: 6, DType: quant.Q8_0})
	if c.RowBytes() != 68 {
		t.Fatalf("RowBytes %d, want 2 blocks of 34", c.RowBytes())
	}
	for l := range 3 {
		if len(c.KQ8(l)) != 6*4*68 || len(c.VQ8(l)) != 6*4*68 || c.KF16(l) != nil || c.KF32(l) != nil {
			t.Fatalf("layer %d: K %d V %d bytes, want %d", l, len(c.KQ8(l)), len(c.VQ8(l)), 6*4*68)
		}
	}
	if c.KQ8(3) != nil || c.VQ8(-1) != nil {
		t.Fatalf("out-of-range layer must give nil")
	}
}

func TestCopyOnWriteIsolatesSequences(t *testing.T) {
	tests := []struct {
		name  string
		dtype quant.Type
	}{
		{name: "f32", dtype: quant.F32},
		{name: "f16", dtype: quant.F16},
		{name: "q8_0", dtype: quant.Q8_0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 8, MaxSeqs: 3, DType: tc.dtype})
			// Shared prompt of 6 tokens: one full block and a partial one, refcount 3 each.
			reserve(t, c, []int32{0, 1, 2}, 0, 100, 1, 2, 3, 4, 5, 6)
			shared := visible(t, c, 0)
			// Each sequence writes its own token 6 into the shared partial block.
			reserve(t, c, []int32{0}, 6, 200, 70)
			reserve(t, c, []int32{1}, 6, 300, 71)
			reserve(t, c, []int32{2}, 6, 400, 72)
			for s, k := range []float32{200, 300, 400} {
				got := visible(t, c, s)
				want := append(slices.Clone(shared), entry{Pos: 6, Tok: 70 + int32(s), K: k, V: -k})
				if !slices.Equal(got, want) {
					t.Fatalf("seq %d sees %v, want %v", s, got, want)
				}
				if c.Blocks(s)[0] != c.Blocks(0)[0] {
					t.Fatalf("the full block must stay shared")
				}
			}
			// Two copies were made; the last writer took the original block over.
			st := c.Stats()
			if st.Used != 4 || st.Shared != 1 || st.UsedCells != 4+3*3 {
				t.Fatalf("stats %+v", st)
			}
			checkInvariants(t, c)
		})
	}
}

func TestReserveCountsCopyOnWriteWithinBatch(t *testing.T) {
	// Seqs 0 and 1 share one partial block; the cache has exactly one free block left.
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 2, MaxSeqs: 3})
	reserve(t, c, []int32{0, 1}, 0, 0, 1, 2)
	reserve(t, c, []int32{2}, 0, 0, 9)
	if c.Stats().Free != 0 {
		t.Fatalf("setup: %+v", c.Stats())
	}
	// Both sequences write: seq 0 needs a copy, seq 1 then owns the original alone. No block is
	// free, so even one copy is too many.
	pos := []int32{2, 2}
	seqs := [][]int32{{0}, {1}}
	before := takeSnapshot(c)
	if c.CanReserve(pos, seqs) {
		t.Fatalf("CanReserve true with no free block")
	}
	if err := c.CheckReserve(pos, seqs); !errors.Is(err, ErrKVFull) {
		t.Fatalf("CheckReserve = %v, want ErrKVFull", err)
	}
	err := c.Reserve([]int32{5, 6}, pos, seqs, make([]int32, 2))
	if !errors.Is(err, ErrKVFull) {
		t.Fatalf("Reserve error %v, want ErrKVFull", err)
	}
	if !before.equal(takeSnapshot(c)) {
		t.Fatalf("ErrKVFull changed the cache")
	}
	// Freeing seq 2 gives exactly the one block needed.
	c.SeqFree(2)
	if !c.CanReserve(pos, seqs) {
		t.Fatalf("CanReserve false with the one needed block free")
	}
	if err := c.Reserve([]int32{5, 6}, pos, seqs, make([]int32, 2)); err != nil {
		t.Fatal(err)
	}
	// And a third write into seq 1's block needs nothing.
	if !c.CanReserve([]int32{3}, [][]int32{{1}}) {
		t.Fatalf("in-place append refused")
	}
	checkInvariants(t, c)
}

func TestErrKVFullLeavesStateUnchanged(t *testing.T) {
	tests := []struct {
		name  string
		toks  int
		seqs  []int32
		start int32
	}{
		{name: "new blocks", toks: 9, seqs: []int32{1}, start: 0},
		{name: "shared token new blocks", toks: 13, seqs: []int32{2, 3}, start: 0},
		{name: "exactly one too many", toks: 11, seqs: []int32{0}, start: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{BlockSize: 4, NumBlocks: 4, MaxSeqs: 4})
			reserve(t, c, []int32{0}, 0, 0, 1, 2, 3, 4, 5, 6) // 2 blocks used, 2 free
			c.SeqFree(0)
			reserve(t, c, []int32{0}, 0, 0, 1, 2, 3, 4, 5, 6) // re-uses them; one block cached
			before := takeSnapshot(c)
			_, err := tryReserve(c, tc.seqs, tc.start, 0, make([]int32, tc.toks)...)
			if !errors.Is(err, ErrKVFull) {
				t.Fatalf("error %v, want ErrKVFull", err)
			}
			if !before.equal(takeSnapshot(c)) {
				t.Fatalf("state changed")
			}
		})
	}
}

func TestForgetCells(t *testing.T) {
	c := newCache(t, Config{BlockSize: 4, NumBlocks: 4, MaxSeqs: 2})
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	cells := reserve(t, c, []int32{0}, 0, 0, prompt...)
	// The forward pass failed: the blocks must not be offered to anyone.
	c.ForgetCells(cells[4:])
	c.ForgetCells([]int32{-5, 999})
	if got := c.MatchPrefix(prompt); got != 4 {
		t.Fatalf("MatchPrefix after ForgetCells = %d, want 4", got)
	}
	c.SeqFree(0)
	if st := c.Stats(); st.Cached != 1 || st.Free != 3 {
		t.Fatalf("stats %+v", st)
	}
	// Forgetting a cached block moves it to the free list.
	c.ForgetCells(cells[:1])
	if st := c.Stats(); st.Cached != 0 || st.Free != 4 || c.MatchPrefix(prompt) != 0 {
		t.Fatalf("stats %+v", st)
	}
	checkInvariants(t, c)
}
