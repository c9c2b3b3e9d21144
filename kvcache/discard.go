package kvcache

import "fmt"

// SeqDiscard is a context shift in one call, llama.cpp's seq_rm(p0, p1) then seq_add(p1, -1,
// -(p1-p0)), that also gives the dropped cells' memory back: it removes seq's cells at positions
// in [p0, p1), moves the cells at positions >= p1 down by d = p1-p0 (keys re-rotated by -d, as
// SeqShift does) and compacts the sequence's slots: from the first slot whose
// cell goes (or is a hole) on, the surviving cells are copied, in slot order, into consecutive
// slots, so that the sequence ends ceil(survivors/BlockSize) blocks long and releases the rest.
// Cells at positions < p0 keep their position and keys.
//
// Blocks the compaction writes into lose their prefix hashes and are marked stale (never hashed
// nor copied by a partial match again until reallocated); one that other sequences also hold is
// replaced by a new block of seq's own (they keep seeing the old one), so the call needs as many
// free or evictable blocks as such shared blocks, and returns ErrKVFull, with nothing changed,
// when they are not there. Blocks released at the end that still carry a hash (untouched full
// blocks of the newer cells) stay cached. It returns an error when seq is not a valid id, or the
// range is not 0 <= p0 < p1. The moves and re-rotations become store operations (KVCopy runs of
// the moved cells, in slot order, then KVShift runs of the cells at p1 or later, by -d): for the
// store, one K/V row copy per layer for every moved cell and one key rotation per layer for every
// cell at p1 or later. No allocation once the scratch has grown to the sequence's length.
func (c *Manager) SeqDiscard(seq int, p0, p1 int32) error {
	c.gen++
	if seq < 0 || seq >= len(c.seqs) {
		return fmt.Errorf("kvcache: SeqDiscard: sequence id %d outside [0, %d)", seq, len(c.seqs))
	}
	if p0 < 0 || p1 <= p0 {
		return fmt.Errorf("kvcache: SeqDiscard: range [%d, %d) is not 0 <= p0 < p1", p0, p1)
	}
	r := posRange{p0, p1}
	sq := &c.seqs[seq]
	// Dry run: the survivors' destination slots are 0, 1, ... from the first non-survivor on;
	// count the destination blocks that are shared (each needs a new block).
	first := int32(-1) // first slot that is not a survivor
	k := int32(0)      // survivors so far = the next destination slot
	need := 0
	lastBlk := int32(-1)
	for i := range sq.n {
		p := c.cells.pos(c.cellOf(seq, i))
		if p < 0 || r.has(p) {
			if first < 0 {
				first = i
			}
			continue
		}
		if (first >= 0 || p >= p1) && k/c.bs != lastBlk {
			lastBlk = k / c.bs
			if c.ref[sq.table[lastBlk]] > 1 {
				need++
			}
		}
		k++
	}
	if err := c.canAlloc(need); err != nil {
		return fmt.Errorf("SeqDiscard of [%d, %d) in sequence %d: %w", p0, p1, seq, err)
	}
	// The move: sources are read through the table as it was (a shared block replaced in the
	// table keeps its content for its other holders, and for the cells still to be read); a
	// destination slot never passes its source, so writing in place reads every cell first.
	c.oldTable = append(c.oldTable[:0], sq.table...)
	c.rotated = c.rotated[:0]
	d := p1 - p0
	j, prepared := int32(0), int32(-1)
	for i := range sq.n {
		src := c.oldTable[i/c.bs]*c.bs + i%c.bs
		p := c.cells.pos(src)
		if p < 0 || r.has(p) {
			continue
		}
		if (first >= 0 && i >= first) || p >= p1 {
			if bi := j / c.bs; bi != prepared {
				prepared = bi
				c.ownForDiscard(seq, bi, j-bi*c.bs)
			}
			dst := sq.table[j/c.bs]*c.bs + j%c.bs
			if dst != src {
				c.moveCell(src, dst)
			}
			if p >= p1 {
				c.cells.move(dst, p-d)
				c.rotated = append(c.rotated, dst)
			}
		}
		j++
	}
	c.rotateCells(c.rotated, -d)
	c.truncate(sq, j)
	c.trim(seq)
	return nil
}

// ownForDiscard makes slot bi of seq's table a block seq may write, whose first count cells
// (already in their final place) are kept: a shared block is replaced by a new one with those
// cells copied; an own block loses its hash. Either way it is marked stale.
func (c *Manager) ownForDiscard(seq int, bi, count int32) {
	b := c.seqs[seq].table[bi]
	if c.ref[b] > 1 {
		nb := c.alloc()
		c.copyCells(b, nb, count)
		c.split(b, nb, 1)
		c.seqs[seq].table[bi] = nb
		b = nb
	} else {
		c.unhash(b)
	}
	c.markStale(b)
}

// moveCell copies cell src (position, token; K and V of every layer through a store operation)
// to cell dst.
func (c *Manager) moveCell(src, dst int32) {
	c.cells.copyRange(src, dst, 1)
	c.ops.copyCells(src, dst, 1)
}

// rotateCells asks the store to re-rotate the keys of cells by delta positions.
func (c *Manager) rotateCells(cells []int32, delta int32) {
	if delta == 0 {
		return
	}
	for _, cell := range cells {
		c.ops.shift(cell, delta)
	}
}
