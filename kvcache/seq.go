package kvcache

import (
	"fmt"
	"math"
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
func (c *Manager) keptLen(seq int, r posRange) int32 {
	for i := c.seqs[seq].n - 1; i >= 0; i-- {
		if p := c.cells.pos(c.cellOf(seq, i)); p >= 0 && !r.has(p) {
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
func (c *Manager) SeqRemove(seq int, p0, p1 int32) error {
	c.gen++
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
			if p := c.cells.pos(c.cellOf(s, i)); p < 0 || !r.has(p) || i/c.bs == last {
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
	if err := c.canAlloc(need); err != nil {
		return fmt.Errorf("removing positions [%d, %d): %w", p0, p1, err)
	}
	for s := lo; s < hi; s++ {
		kept := c.keptLen(s, r)
		last, b := int32(-1), int32(-1)
		for i := range kept {
			p := c.cells.pos(c.cellOf(s, i))
			if p < 0 || !r.has(p) {
				continue
			}
			if bi := i / c.bs; bi != last {
				last = bi
				b = c.cowBlock(s, int(bi), min(c.bs, kept-bi*c.bs))
				c.unhash(b)
			}
			c.cells.empty(b*c.bs + i%c.bs)
		}
		c.seqs[s].n = kept
		c.trim(s)
	}
	return nil
}

// SeqFree empties seq (every sequence if seq < 0); SeqRemove(seq, -1, -1). Unknown ids are
// ignored.
func (c *Manager) SeqFree(seq int) {
	c.gen++
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
func (c *Manager) SeqKeep(seq int) {
	c.gen++
	for s := range c.seqs {
		if s != seq {
			c.freeSeq(s)
		}
	}
}

// SeqCopy makes the empty sequence dst hold src's cells whose positions are in [p0, p1), in
// src's order, like llama.cpp's seq_cp: blocks with no non-qualifying cell are shared
// (refcount, no copy; so is a last block whose non-qualifying cells all come after the last
// qualifying one, which dst's length leaves out), blocks with only non-qualifying cells are
// skipped, and the others are copied with the non-qualifying cells emptied. A copy of the whole
// sequence shares every block, so dst and src may then be decoded together. Copying a sequence onto itself, an empty range or an empty source is a no-op. It
// returns an error for bad ids or a non-empty dst, and ErrKVFull, with nothing changed, when the
// copies do not fit.
func (c *Manager) SeqCopy(src, dst int, p0, p1 int32) error {
	c.gen++
	if src < 0 || src >= len(c.seqs) || dst < 0 || dst >= len(c.seqs) {
		return fmt.Errorf("kvcache: SeqCopy: sequence ids %d, %d must be in [0, %d)", src, dst, len(c.seqs))
	}
	if src == dst {
		return nil
	}
	if c.seqs[dst].n != 0 {
		return fmt.Errorf("kvcache: SeqCopy: destination sequence %d is not empty (%d cells)", dst, c.seqs[dst].n)
	}
	r := makeRange(p0, p1)
	ss := &c.seqs[src]
	if ss.n == 0 || r.empty() {
		return nil
	}
	last := int32(-1) // the last slot of src holding a cell in r
	for i := range ss.n {
		if p := c.cells.pos(c.cellOf(src, i)); p >= 0 && r.has(p) {
			last = i
		}
	}
	if last < 0 {
		return nil
	}
	// Per block up to last: what to do with it (0 skip, 1 share, 2 copy).
	need := 0
	for bi := int32(0); bi <= last/c.bs; bi++ {
		if c.copyAction(src, bi, last, r) == 2 {
			need++
		}
	}
	if err := c.canAlloc(need); err != nil {
		return fmt.Errorf("copying positions [%d, %d) of sequence %d: %w", p0, p1, src, err)
	}
	ds := &c.seqs[dst]
	ds.table = ds.table[:0]
	ds.salt, ds.root = ss.salt, ss.root // the copy continues src's chain
	n := int32(0)
	for bi := int32(0); bi <= last/c.bs; bi++ {
		count := min(c.bs, last+1-bi*c.bs) // slots of this block dst covers
		b := ss.table[bi]
		switch c.copyAction(src, bi, last, r) {
		case 0:
			continue
		case 1:
			c.pin(b)
		case 2:
			nb := c.alloc()
			c.copyCells(b, nb, count)
			for j := range count {
				if p := c.cells.pos(nb*c.bs + j); p >= 0 && !r.has(p) {
					c.cells.empty(nb*c.bs + j)
				}
			}
			c.hold(nb, 1)
			b = nb
		}
		ds.table = append(ds.table, b)
		n = int32(len(ds.table)-1)*c.bs + count
	}
	ds.n = n
	c.trim(dst)
	return nil
}

// copyAction says what SeqCopy does with block bi of src when dst takes the cells in r up to
// slot last: 1 share it (no non-empty cell up to last outside r), 0 skip it (only cells outside
// r), 2 copy it.
func (c *Manager) copyAction(src int, bi, last int32, r posRange) int {
	in, out := false, false
	for i := bi * c.bs; i < min((bi+1)*c.bs, last+1); i++ {
		switch p := c.cells.pos(c.cellOf(src, i)); {
		case p < 0:
		case r.has(p):
			in = true
		default:
			out = true
		}
	}
	switch {
	case !out:
		return 1
	case !in:
		return 0
	}
	return 2
}

// SeqShift adds delta to the positions of seq's cells in [p0, p1) and has the store re-rotate
// their keys (a KVShift operation), like llama.cpp's seq_add. Shared blocks are copied first;
// cells whose new position is negative are removed; touched blocks lose their prefix hashes. It
// returns an error when seq is not a valid id or a new position overflows int32, and ErrKVFull
// when the copies do not fit; nothing is changed then.
func (c *Manager) SeqShift(seq int, p0, p1, delta int32) error {
	if delta == 0 {
		return c.remap("SeqShift", seq, makeRange(p0, p1), nil)
	}
	return c.remap("SeqShift", seq, makeRange(p0, p1), func(p int32) (int32, error) {
		if int64(p)+int64(delta) > math.MaxInt32 {
			return 0, fmt.Errorf("kvcache: SeqShift: position %d + %d overflows int32", p, delta)
		}
		return p + delta, nil
	})
}

// SeqDiv divides the positions of seq's cells in [p0, p1) by d (rounding down) and re-rotates
// their keys accordingly, like llama.cpp's seq_div (used to compress positions, e.g. for
// self-extend); several cells may then share a position. Errors and the handling of shared
// blocks and hashes are SeqShift's; d must be positive, and d == 1 is a no-op.
func (c *Manager) SeqDiv(seq int, p0, p1, d int32) error {
	if d <= 0 {
		return fmt.Errorf("kvcache: SeqDiv: divisor %d must be positive", d)
	}
	if d == 1 {
		return c.remap("SeqDiv", seq, makeRange(p0, p1), nil)
	}
	return c.remap("SeqDiv", seq, makeRange(p0, p1), func(p int32) (int32, error) { return p / d, nil })
}

// remap moves the cells of seq in r to the positions f gives (nil: none move, only the
// arguments are checked), re-rotating their keys by the difference; see SeqShift.
func (c *Manager) remap(op string, seq int, r posRange, f func(int32) (int32, error)) error {
	c.gen++
	if seq < 0 || seq >= len(c.seqs) {
		return fmt.Errorf("kvcache: %s: sequence id %d outside [0, %d)", op, seq, len(c.seqs))
	}
	if f == nil || r.empty() {
		return nil
	}
	sq := &c.seqs[seq]
	need := 0
	last := int32(-1)
	for i := range sq.n {
		p := c.cells.pos(c.cellOf(seq, i))
		if p < 0 || !r.has(p) {
			continue
		}
		np, err := f(p)
		if err != nil {
			return err
		}
		if bi := i / c.bs; np != p && bi != last {
			last = bi
			if c.ref[sq.table[bi]] > 1 {
				need++
			}
		}
	}
	if err := c.canAlloc(need); err != nil {
		return fmt.Errorf("%s of sequence %d: %w", op, seq, err)
	}
	last = -1
	var b int32
	for i := range sq.n {
		p := c.cells.pos(c.cellOf(seq, i))
		if p < 0 || !r.has(p) {
			continue
		}
		np, _ := f(p)
		if np == p {
			continue
		}
		if bi := i / c.bs; bi != last {
			last = bi
			b = c.cowBlock(seq, int(bi), min(c.bs, sq.n-bi*c.bs))
			c.unhash(b)
			c.markStale(b)
		}
		cell := b*c.bs + i%c.bs
		if np < 0 {
			c.cells.empty(cell)
			continue
		}
		c.cells.move(cell, np)
		c.ops.shift(cell, np-p)
	}
	c.trim(seq)
	return nil
}
