package kvcache

import (
	"fmt"
	"math"

	"ubatch/quant"
)

// posRange is a half-open range [p0, p1) of positions with llama.cpp's conventions: p0 < 0 means
// 0, p1 < 0 means no upper bound.
type posRange struct{ p0, p1 int32 }

func makeRange(p0, p1 int32) posRange {
	return posRange{max(p0, 0), p1}
}

func (r posRange) empty() bool { return r.p1 >= 0 && r.p0 >= r.p1 }

// has reports whether position p (>= 0 for a non-empty cell) is in the range.
func (r posRange) has(p int32) bool { return p >= r.p0 && (r.p1 < 0 || p < r.p1) }

// keptLen is seq's logical length once the cells in r are removed: one past its last slot that
// stays non-empty.
func (c *Cache) keptLen(seq int, r posRange) int32 {
	for i := c.seqs[seq].n - 1; i >= 0; i-- {
		if p := c.pos[c.cellOf(seq, i)]; p >= 0 && !r.has(p) {
			return i + 1
		}
	}
	return 0
}

// SeqRemove removes the cells of seq (every sequence if seq < 0) whose positions are in
// [p0, p1). Cells at the end of a sequence's history are dropped by lowering its length, which
// releases whole blocks and copies nothing; cells before some kept cell are marked empty in
// place (after copy-on-write if the block is shared, so other sequences keep seeing them), and
// their blocks lose their prefix hashes. An empty range is a no-op. It returns an error for
// seq >= MaxSeqs, and ErrKVFull, with nothing changed, when the copy-on-write copies do not fit.
func (c *Cache) SeqRemove(seq int, p0, p1 int32) error {
	if seq >= len(c.seqs) {
		return fmt.Errorf("kvcache: SeqRemove: sequence id %d outside [0, %d)", seq, len(c.seqs))
	}
	r := makeRange(p0, p1)
	if r.empty() {
		return nil
	}
	lo, hi := seq, seq+1
	if seq < 0 {
		lo, hi = 0, len(c.seqs)
	}
	// Dry run: count the copies the in-place removals need. Blocks released by the trims are not
	// counted as available, which only errs on the side of ErrKVFull.
	c.sim.begin()
	need := 0
	for s := lo; s < hi; s++ {
		kept := c.keptLen(s, r)
		last := int32(-1)
		for i := range kept {
			if p := c.pos[c.cellOf(s, i)]; p < 0 || !r.has(p) || i/c.bs == last {
				continue
			}
			last = i / c.bs
			b := c.seqs[s].table[last]
			if rc := c.simRef(b); rc > 1 {
				need++
				c.setSimRef(b, rc-1)
			}
		}
	}
	if avail := c.available(); need > avail {
		return fmt.Errorf("%w: removing positions [%d, %d) needs %d block copies, %d available",
			ErrKVFull, p0, p1, need, avail)
	}
	for s := lo; s < hi; s++ {
		kept := c.keptLen(s, r)
		last, b := int32(-1), int32(-1)
		for i := range kept {
			p := c.pos[c.cellOf(s, i)]
			if p < 0 || !r.has(p) {
				continue
			}
			if bi := i / c.bs; bi != last {
				last = bi
				b = c.cowBlock(s, int(bi), min(c.bs, kept-bi*c.bs))
				c.unhash(b)
			}
			c.pos[b*c.bs+i%c.bs] = -1
		}
		c.seqs[s].n = kept
		c.trim(s)
	}
	return nil
}

// SeqFree empties seq (every sequence if seq < 0); SeqRemove(seq, -1, -1). Unknown ids are
// ignored.
func (c *Cache) SeqFree(seq int) {
	if seq >= len(c.seqs) {
		return
	}
	if seq >= 0 {
		c.freeSeq(seq)
		return
	}
	for s := range c.seqs {
		c.freeSeq(s)
	}
}

// SeqKeep empties every sequence but seq (all of them if seq is not a valid id).
func (c *Cache) SeqKeep(seq int) {
	for s := range c.seqs {
		if s != seq {
			c.freeSeq(s)
		}
	}
}

// SeqCopy makes the empty sequence dst share src's cells with positions < p1 (all of them if
// p1 < 0): dst's table points at the same blocks, the last partial one included, and nothing is
// copied until one of them writes (copy-on-write). Those cells must be a prefix of src's history
// and p0 must be <= SeqPosMin(src) (a copy starting later is unsupported); both are checked.
// Copying a sequence onto itself, or an empty range, is a no-op.
func (c *Cache) SeqCopy(src, dst int, p0, p1 int32) error {
	if src < 0 || src >= len(c.seqs) || dst < 0 || dst >= len(c.seqs) {
		return fmt.Errorf("kvcache: SeqCopy: sequence ids %d, %d must be in [0, %d)", src, dst, len(c.seqs))
	}
	if src == dst {
		return nil
	}
	if c.seqs[dst].n != 0 {
		return fmt.Errorf("kvcache: SeqCopy: destination sequence %d is not empty (%d cells)", dst, c.seqs[dst].n)
	}
	ss := &c.seqs[src]
	if ss.n == 0 {
		return nil
	}
	r := makeRange(p0, p1)
	if r.empty() {
		return nil
	}
	if r.p0 > ss.posMin {
		return fmt.Errorf("kvcache: SeqCopy: %w: copying from position %d, after the start %d of sequence %d",
			errUnsupported, r.p0, ss.posMin, src)
	}
	n := int32(0)
	beyond := int32(-1) // a cell at or past p1 seen so far
	for i := range ss.n {
		p := c.pos[c.cellOf(src, i)]
		switch {
		case p < 0:
		case !r.has(p):
			if beyond < 0 {
				beyond = p
			}
		case beyond >= 0:
			return fmt.Errorf("kvcache: SeqCopy: %w: position %d of sequence %d comes after position %d >= %d",
				errUnsupported, p, src, beyond, p1)
		default:
			n = i + 1
		}
	}
	ds := &c.seqs[dst]
	ds.table = append(ds.table[:0], ss.table[:(n+c.bs-1)/c.bs]...)
	for _, b := range ds.table {
		c.ref[b]++
	}
	ds.n = n
	c.updateRange(dst)
	return nil
}

// SeqShift adds delta to the positions of seq's cells in [p0, p1) and re-rotates their keys with
// Config.ShiftK (through a float32 row for F16 storage), like llama.cpp's seq_add. Shared blocks
// are copied first; cells whose new position is negative are removed; touched blocks lose their
// prefix hashes. It returns an error when ShiftK is nil, seq is not a valid id, or a new
// position overflows int32, and ErrKVFull when the copies do not fit; nothing is changed then.
func (c *Cache) SeqShift(seq int, p0, p1, delta int32) error {
	if c.cfg.ShiftK == nil {
		return fmt.Errorf("kvcache: SeqShift: Config.ShiftK is nil")
	}
	if seq < 0 || seq >= len(c.seqs) {
		return fmt.Errorf("kvcache: SeqShift: sequence id %d outside [0, %d)", seq, len(c.seqs))
	}
	r := makeRange(p0, p1)
	if delta == 0 || r.empty() {
		return nil
	}
	sq := &c.seqs[seq]
	need := 0
	last := int32(-1)
	for i := range sq.n {
		p := c.pos[c.cellOf(seq, i)]
		if p < 0 || !r.has(p) {
			continue
		}
		if int64(p)+int64(delta) > math.MaxInt32 {
			return fmt.Errorf("kvcache: SeqShift: position %d + %d overflows int32", p, delta)
		}
		if bi := i / c.bs; bi != last {
			last = bi
			if c.ref[sq.table[bi]] > 1 {
				need++
			}
		}
	}
	if avail := c.available(); need > avail {
		return fmt.Errorf("%w: shifting sequence %d needs %d block copies, %d available", ErrKVFull, seq, need, avail)
	}
	kv := c.cfg.KVDim
	last = -1
	var b int32
	for i := range sq.n {
		p := c.pos[c.cellOf(seq, i)]
		if p < 0 || !r.has(p) {
			continue
		}
		if bi := i / c.bs; bi != last {
			last = bi
			b = c.cowBlock(seq, int(bi), min(c.bs, sq.n-bi*c.bs))
			c.unhash(b)
			c.stale[b] = true
		}
		cell := int(b*c.bs + i%c.bs)
		np := p + delta
		if np < 0 {
			c.pos[cell] = -1
			continue
		}
		c.pos[cell] = np
		for l := range c.k32 {
			c.cfg.ShiftK(c.k32[l][cell*kv:(cell+1)*kv], delta)
		}
		for l := range c.k16 {
			row := c.k16[l][cell*kv : (cell+1)*kv]
			quant.F16ToF32s(c.rowBuf, row)
			c.cfg.ShiftK(c.rowBuf, delta)
			quant.F32ToF16s(row, c.rowBuf)
		}
	}
	c.trim(seq)
	return nil
}
