package kvcache

// Kept partial blocks. A sequence's last block is usually partly filled: every chat turn ends in
// one, and the next turn's prompt starts with it. When the sequence is freed that block is kept
// (refcount 0, in the eviction heap) instead of freed, with part[b] = its filled cells, when a
// fresh decode of its tokens would give the same K/V: not stale (no re-rotated keys, no failed
// forward pass), its cells at the canonical positions depth*BlockSize + j, j in [0, part), and
// the blocks before it an intact hash chain from the sequence start. It has no hash of its own
// (it is not full) and is not in the prefix index; it is linked among its parent's children,
// where partial matches (prefix.go) look, and they copy its leading cells into the new
// sequence's own block, as from any other candidate. Eviction prices it like a full block
// (evict.go). A kept block whose cells another child of the same parent already holds is not
// kept, and one that holds all of a kept sibling's cells replaces it, so that n identical
// prompts keep one copy.

// freeSeq releases all of seq's blocks, last first, so that when they become cached the blocks
// deepest into the sequence (the least likely to be shared by a future prompt) are evicted
// first. The last block, if partly filled and seq's alone, is kept for partial matches (see
// above).
func (c *Manager) freeSeq(seq int) {
	sq := &c.seqs[seq]
	if k := len(sq.table); k > 0 {
		b := sq.table[k-1]
		if count := sq.n - int32(k-1)*c.bs; c.ref[b] == 1 && c.keepable(seq, k-1, count) {
			parent := sq.root
			if k > 1 {
				parent = c.hash[sq.table[k-2]]
			}
			c.drop(b)
			c.setKey(b, c.parentKey(seq, k-1), count)
			c.keep(b, int32(k-1), count, parent)
			sq.table = sq.table[:k-1]
		}
	}
	for i := len(sq.table) - 1; i >= 0; i-- {
		c.release(sq.table[i])
	}
	sq.table = sq.table[:0]
	sq.intent = sq.intent[:0]
	sq.n, sq.posMin, sq.posMax = 0, -1, -1
	sq.salt, sq.root = Salt{}, rootHash
}

// keepable reports whether block slot bi of seq, whose first count cells seq covers, may be kept
// as a partial block: partly filled, not hashed (a full block that lost its tail keeps its hash
// and is cached as such), not stale, its count cells at positions bi*BlockSize.. in order and an
// intact hash chain before it.
func (c *Manager) keepable(seq, bi int, count int32) bool {
	b := c.seqs[seq].table[bi]
	if count <= 0 || count >= c.bs || c.hashed[b] || c.stale[b] {
		return false
	}
	return c.cells.canonical(b*c.bs, count, int32(bi)*c.bs) && c.chained(seq, bi)
}

// keep makes the unreferenced block b, the first count cells of block number depth of a freed
// sequence chained from the full block with hash parent, a kept partial block, unless a child
// of parent already holds those cells (b is freed then); kept siblings whose cells are a prefix
// of b's are freed in its favour. Like partial matches, it looks at maxSiblings children at most.
func (c *Manager) keep(b, depth, count int32, parent uint64) {
	toks := c.cells.tokens(b*c.bs, count)
	x := c.kids.first(parent)
	for n := 0; x >= 0 && n < maxSiblings; n++ {
		next := c.kids.after(x)
		switch {
		case c.stale[x]:
		case c.leadingCells(x, depth, toks[:min(count, c.cellsIn(x))]) == int(count):
			c.freeBlock(b) // x holds b's cells already
			return
		case c.part[x] > 0 && c.leadingCells(b, depth, c.cells.tokens(x*c.bs, c.part[x])) == int(c.part[x]):
			c.uncache(x) // b holds x's cells and more
		}
		x = next
	}
	c.setKept(b, count, parent, depth)
}

// cellsIn is the number of leading cells of the child block b (hashed or kept partial) that
// hold its content.
func (c *Manager) cellsIn(b int32) int32 {
	if c.part[b] > 0 {
		return c.part[b]
	}
	return c.bs
}

// linkChild puts b, hashed or kept partial with parent[b] set, at the head of its parent's list
// of children.
func (c *Manager) linkChild(b int32) { c.kids.link(b, c.parent[b]) }

// unlinkChild removes b from its parent's list of children.
func (c *Manager) unlinkChild(b int32) { c.kids.unlink(b, c.parent[b]) }

// promoteDuplicate gives the index entry b just lost to a live duplicate of b (same hash, among
// the first maxSiblings children of b's parent), so that a block whose twin was overwritten,
// shifted or evicted stays matchable as a full block while its sequence lives.
func (c *Manager) promoteDuplicate(b int32) {
	h := c.hash[b]
	x := c.kids.first(c.parent[b])
	for n := 0; x >= 0 && n < maxSiblings; n++ {
		if x != b && c.hashed[x] && !c.index.holds(x) && c.hash[x] == h {
			c.indexIfFree(x) // free: b just left it
			return
		}
		x = c.kids.after(x)
	}
}
