package kvcache

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	"ubatch/quant"
)

// addShift is a stand-in for RoPE re-rotation in tests: it adds delta to every key value, so a
// test can tell exactly which cells were shifted and by how much.
func addShift(_ int, k []float32, delta int32) {
	for i := range k {
		k[i] += float32(delta)
	}
}

func newCache(t testing.TB, cfg Config) *Cache {
	t.Helper()
	return newCacheShift(t, cfg, nil)
}

// newCacheShift is newCache with shift re-rotating keys (nil: addShift).
func newCacheShift(t testing.TB, cfg Config, shift func(l int, k []float32, delta int32)) *Cache {
	t.Helper()
	if cfg.NLayers == 0 {
		cfg.NLayers = 2
	}
	if cfg.KVDim == 0 {
		cfg.KVDim = 3
		if cfg.DType == quant.Q8_0 {
			cfg.KVDim = 32 // one Q8_0 block
		}
	}
	if cfg.MaxSeqs == 0 {
		cfg.MaxSeqs = 4
	}
	c, err := newWithShift(cfg, shift)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return c
}

// writeKV stores the value k (plus the layer number) in every K element of cell and its negation
// in every V element, as a forward pass would write one row per layer.
func writeKV(c *Cache, cell int32, k float32) {
	kv := c.cfg.KVDim
	for l := range c.cfg.NLayers {
		val := k + float32(l)
		row := int(cell) * kv
		for d := range kv {
			switch c.cfg.DType {
			case quant.F32:
				c.KF32(l)[row+d], c.VF32(l)[row+d] = val, -val
			case quant.F16:
				c.KF16(l)[row+d], c.VF16(l)[row+d] = quant.F32ToF16(val), quant.F32ToF16(-val)
			case quant.Q8_0:
				// Scale val, every q 1: the row reads back as half(val), as in an F16 cache.
				rb := c.RowBytes()
				setQ8Block(c.KQ8(l)[int(cell)*rb+d/32*34:], val)
				setQ8Block(c.VQ8(l)[int(cell)*rb+d/32*34:], -val)
			}
		}
	}
}

// setQ8Block writes a Q8_0 block whose 32 values all dequantize to half(val).
func setQ8Block(blk []byte, val float32) {
	h := quant.F32ToF16(val)
	blk[0], blk[1] = byte(h), byte(h>>8)
	for i := range 32 {
		blk[2+i] = 1
	}
}

// q8At dequantizes element d of cell's row in Q8_0 storage s.
func q8At(c *Cache, s []byte, cell int32, d int) float32 {
	blk := s[int(cell)*c.RowBytes()+d/32*34:]
	return quant.F16ToF32(uint16(blk[0])|uint16(blk[1])<<8) * float32(int8(blk[2+d%32]))
}

// readKV returns the value writeKV stored in cell, or an error if the layers and elements do not
// agree (a partial copy or a shift that missed a layer).
func readKV(c *Cache, cell int32) (k float32, err error) {
	kv := c.cfg.KVDim
	row := int(cell) * kv
	get := func(l, d int) (float32, float32) {
		if c.cfg.DType == quant.Q8_0 {
			return q8At(c, c.KQ8(l), cell, d), q8At(c, c.VQ8(l), cell, d)
		}
		if c.cfg.DType == quant.F16 {
			return quant.F16ToF32(c.KF16(l)[row+d]), quant.F16ToF32(c.VF16(l)[row+d])
		}
		return c.KF32(l)[row+d], c.VF32(l)[row+d]
	}
	// A shift requantizes Q8_0 keys (q 127, the scale rounded to half): layers then agree to
	// within that rounding only.
	eq := func(a, b float32) bool {
		return a == b || c.cfg.DType == quant.Q8_0 && math.Abs(float64(a-b)) <= math.Abs(float64(b))/200
	}
	k, _ = get(0, 0)
	for l := range c.cfg.NLayers {
		for d := range kv {
			kk, vv := get(l, d)
			if !eq(kk, k+float32(l)) {
				return 0, fmt.Errorf("cell %d layer %d elem %d: K %v, want %v", cell, l, d, kk, k+float32(l))
			}
			if _, v00 := get(0, 0); vv != v00-float32(l) {
				return 0, fmt.Errorf("cell %d layer %d elem %d: V %v, want %v", cell, l, d, vv, v00-float32(l))
			}
		}
	}
	return k, nil
}

// entry is what a sequence sees in one of its non-empty cells.
type entry struct {
	Pos, Tok int32
	K, V     float32 // layer 0, element 0
}

func (e entry) String() string { return fmt.Sprintf("{p%d t%d k%g v%g}", e.Pos, e.Tok, e.K, e.V) }

// visible lists seq's non-empty cells in slot order, as the attention would read them.
func visible(t testing.TB, c *Cache, seq int) []entry {
	t.Helper()
	var out []entry
	blocks := c.Blocks(seq)
	bs := int32(c.Config().BlockSize)
	for i := range int32(c.SeqCells(seq)) {
		cell := blocks[i/bs]*bs + i%bs
		p := c.Pos(cell)
		if p < 0 {
			continue
		}
		k, err := readKV(c, cell)
		if err != nil {
			t.Fatalf("seq %d slot %d: %v", seq, i, err)
		}
		var v float32
		switch c.cfg.DType {
		case quant.Q8_0:
			v = q8At(c, c.VQ8(0), cell, 0)
		case quant.F16:
			v = quant.F16ToF32(c.VF16(0)[int(cell)*c.cfg.KVDim])
		default:
			v = c.VF32(0)[int(cell)*c.cfg.KVDim]
		}
		out = append(out, entry{Pos: p, Tok: c.Token(cell), K: k, V: v})
	}
	return out
}

// reserve decodes toks for seqs at consecutive positions from p0, writing K = kBase+i for token
// i, and fails the test on error.
func reserve(t testing.TB, c *Cache, seqs []int32, p0 int32, kBase float32, toks ...int32) []int32 {
	t.Helper()
	cells, err := tryReserve(c, seqs, p0, kBase, toks...)
	if err != nil {
		t.Fatalf("Reserve(seqs %v, pos %d.., %d tokens): %v", seqs, p0, len(toks), err)
	}
	return cells
}

func tryReserve(c *Cache, seqs []int32, p0 int32, kBase float32, toks ...int32) ([]int32, error) {
	pos := make([]int32, len(toks))
	ss := make([][]int32, len(toks))
	for i := range toks {
		pos[i] = p0 + int32(i)
		ss[i] = seqs
	}
	cells := make([]int32, len(toks))
	if err := c.Reserve(toks, pos, ss, cells); err != nil {
		return nil, err
	}
	for i, cell := range cells {
		writeKV(c, cell, kBase+float32(i))
	}
	return cells, nil
}

func seqRange(n int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(i)
	}
	return s
}

// snapshot is a deep copy of a cache's state (everything but dry-run scratch).
type snapshot struct {
	Pos, Tok, Ref, Free, Hits, Part []int32
	Hash, Parent                    []uint64
	Hashed, Indexed, Rotated        []bool
	Heap                            []int32
	Prio                            []float64
	Clock                           float64
	Index                           map[uint64]int32
	Seqs                            []seqTable
	K32, V32                        [][]float32
	K16, V16                        [][]uint16
	K8, V8                          [][]byte
}

func takeSnapshot(c *Cache) snapshot {
	c.sync()
	s := snapshot{
		Pos: slices.Clone(c.cells.ps), Tok: slices.Clone(c.cells.ts), Ref: slices.Clone(c.ref),
		Free: slices.Clone(c.free), Hits: slices.Clone(c.hits), Part: slices.Clone(c.part), Heap: slices.Clone(c.evq.heap), Prio: slices.Clone(c.evq.prio),
		Hash: slices.Clone(c.hash), Parent: slices.Clone(c.parent),
		Hashed: slices.Clone(c.hashed), Indexed: slices.Clone(c.index.is), Rotated: slices.Clone(c.stale),
		Clock: c.evq.clock, Index: maps.Clone(c.index.entry),
	}
	for _, sq := range c.seqs {
		s.Seqs = append(s.Seqs, seqTable{table: slices.Clone(sq.table), n: sq.n, posMin: sq.posMin, posMax: sq.posMax})
	}
	st := &c.st
	for l := range st.k32 {
		s.K32 = append(s.K32, slices.Clone(st.k32[l]))
		s.V32 = append(s.V32, slices.Clone(st.v32[l]))
	}
	for l := range st.k16 {
		s.K16 = append(s.K16, slices.Clone(st.k16[l]))
		s.V16 = append(s.V16, slices.Clone(st.v16[l]))
	}
	for l := range st.k8 {
		s.K8 = append(s.K8, slices.Clone(st.k8[l]))
		s.V8 = append(s.V8, slices.Clone(st.v8[l]))
	}
	return s
}

func (s snapshot) equal(o snapshot) bool {
	eqSeqs := slices.EqualFunc(s.Seqs, o.Seqs, func(a, b seqTable) bool {
		return slices.Equal(a.table, b.table) && a.n == b.n && a.posMin == b.posMin && a.posMax == b.posMax
	})
	return eqSeqs && slices.Equal(s.Pos, o.Pos) && slices.Equal(s.Tok, o.Tok) && slices.Equal(s.Ref, o.Ref) && slices.Equal(s.Part, o.Part) &&
		slices.Equal(s.Heap, o.Heap) && slices.Equal(s.Hits, o.Hits) && slices.Equal(s.Prio, o.Prio) && s.Clock == o.Clock && slices.Equal(s.Free, o.Free) &&
		slices.Equal(s.Hash, o.Hash) && slices.Equal(s.Parent, o.Parent) && slices.Equal(s.Hashed, o.Hashed) &&
		slices.Equal(s.Indexed, o.Indexed) && slices.Equal(s.Rotated, o.Rotated) &&
		maps.Equal(s.Index, o.Index) &&
		slices.EqualFunc(s.K32, o.K32, bitsEqual) && slices.EqualFunc(s.V32, o.V32, bitsEqual) &&
		slices.EqualFunc(s.K16, o.K16, slices.Equal) && slices.EqualFunc(s.V16, o.V16, slices.Equal) &&
		slices.EqualFunc(s.K8, o.K8, slices.Equal) && slices.EqualFunc(s.V8, o.V8, slices.Equal)
}

// bitsEqual compares float slices bit for bit (unwritten cells are zero, never NaN, but a bitwise
// comparison is what "unchanged" means).
func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// checkInvariants verifies the bookkeeping against its definition: refcounts equal table
// occurrences, every block is in exactly one of used / LRU / free, the index and LRU agree, table
// lengths match nCells, trailing slots are non-empty and the cached position ranges are right.
func checkInvariants(t testing.TB, c *Cache) {
	t.Helper()
	nb := len(c.ref)
	bs := c.bs
	count := make([]int32, nb)
	for s, sq := range c.seqs {
		if want := int((sq.n + bs - 1) / bs); len(sq.table) != want {
			t.Fatalf("seq %d: %d blocks for %d cells, want %d", s, len(sq.table), sq.n, want)
		}
		seen := map[int32]bool{}
		for _, b := range sq.table {
			if seen[b] {
				t.Fatalf("seq %d holds block %d twice: %v", s, b, sq.table)
			}
			seen[b] = true
			count[b]++
		}
		if sq.n > 0 && c.cells.pos(c.cellOf(s, sq.n-1)) < 0 {
			t.Fatalf("seq %d: trailing slot %d is empty", s, sq.n-1)
		}
		lo, hi := int32(-1), int32(-1)
		for i := range sq.n {
			if p := c.cells.pos(c.cellOf(s, i)); p >= 0 {
				if lo < 0 || p < lo {
					lo = p
				}
				hi = max(hi, p)
			}
		}
		if lo != sq.posMin || hi != sq.posMax {
			t.Fatalf("seq %d: cached range [%d, %d], actual [%d, %d]", s, sq.posMin, sq.posMax, lo, hi)
		}
	}
	inLRU := make([]bool, nb) // in the eviction heap
	for i, b := range c.evq.heap {
		if inLRU[b] || c.evq.idx[b] != int32(i) {
			t.Fatalf("eviction heap broken at %d (block %d, index %d)", i, b, c.evq.idx[b])
		}
		if i > 0 && c.evq.less(int32(i), int32((i-1)/2)) {
			t.Fatalf("eviction heap out of order at %d", i)
		}
		inLRU[b] = true
	}
	for b := range nb {
		if !inLRU[b] && c.evq.idx[b] != -1 {
			t.Fatalf("block %d outside the eviction heap has index %d", b, c.evq.idx[b])
		}
	}
	inFree := make([]bool, nb)
	for _, b := range c.free {
		if inFree[b] {
			t.Fatalf("block %d twice in the free list", b)
		}
		inFree[b] = true
	}
	for b := range nb {
		if c.ref[b] != count[b] {
			t.Fatalf("block %d: refcount %d, held by %d tables", b, c.ref[b], count[b])
		}
		states := 0
		for _, in := range []bool{c.ref[b] > 0, inLRU[b], inFree[b]} {
			if in {
				states++
			}
		}
		if states != 1 {
			t.Fatalf("block %d: ref %d, in LRU %v, free %v", b, c.ref[b], inLRU[b], inFree[b])
		}
		if inLRU[b] && !c.index.is[b] && c.part[b] == 0 {
			t.Fatalf("cached block %d is neither indexed nor a kept partial block", b)
		}
		if inFree[b] && (c.hashed[b] || c.part[b] != 0) {
			t.Fatalf("free block %d is hashed (%v) or kept partial (%d)", b, c.hashed[b], c.part[b])
		}
		if c.part[b] != 0 && (!inLRU[b] || c.hashed[b] || c.stale[b] || c.part[b] >= bs) {
			t.Fatalf("kept partial block %d (%d cells): cached %v, hashed %v, stale %v", b, c.part[b], inLRU[b], c.hashed[b], c.stale[b])
		}
		if c.index.is[b] {
			if !c.hashed[b] || c.index.entry[c.hash[b]] != int32(b) {
				t.Fatalf("block %d marked indexed but the index disagrees", b)
			}
		}
	}
	for h, b := range c.index.entry {
		if !c.index.is[b] || c.hash[b] != h {
			t.Fatalf("index entry %x -> block %d not marked", h, b)
		}
	}
	checkChildLists(t, c)
	st := c.Stats()
	if st.Used+st.Cached+st.Free != st.Total {
		t.Fatalf("stats do not add up: %+v", st)
	}
}

// checkChildLists verifies that every hashed block is in its parent's list of children exactly
// once, in a well-linked list, and no other block is in one.
func checkChildLists(t testing.TB, c *Cache) {
	t.Helper()
	nb := len(c.ref)
	// Every hashed or kept partial block is in its parent's list of children exactly once, no
	// other block is.
	inList := make([]int, nb)
	for p, head := range c.kids.head {
		prev := int32(-1)
		for b := head; b >= 0; b = c.kids.next[b] {
			if !(c.hashed[b] || c.part[b] > 0) || c.parent[b] != p || c.kids.prev[b] != prev {
				t.Fatalf("children of %x: block %d (hashed %v, parent %x, prev %d, want %d)", p, b, c.hashed[b], c.parent[b], c.kids.prev[b], prev)
			}
			inList[b]++
			prev = b
		}
	}
	for b := range nb {
		if want := map[bool]int{true: 1}[c.hashed[b] || c.part[b] > 0]; inList[b] != want {
			t.Fatalf("block %d (hashed %v, kept partial %d) is in %d lists of children", b, c.hashed[b], c.part[b], inList[b])
		}
	}
}
