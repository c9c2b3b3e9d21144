package kvcache

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
)

// rootHash is the parent hash of a sequence's first block.
const rootHash uint64 = 0

// chainHash hashes a block's token ids chained to its parent block's hash. The seed is made in
// New, so hashes differ between caches and processes and cannot be precomputed by a client.
func chainHash(seed maphash.Seed, parent uint64, toks []int32) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], parent)
	h.Write(buf[:])
	for _, t := range toks {
		binary.LittleEndian.PutUint32(buf[:4], uint32(t))
		h.Write(buf[:4])
	}
	return h.Sum64()
}

// hashBlock gives the full block at slot bi of seq's table its chained hash and registers it in
// the prefix index, if its cells hold positions bi*BlockSize.. in order and the block before it
// is hashed (so the whole prefix is the canonical run 0, 1, ... from the sequence start), and no
// key in it was re-rotated by SeqShift. An index entry already held by another block with the
// same hash is left alone.
func (c *Manager) hashBlock(seq, bi int) {
	sq := &c.seqs[seq]
	b := sq.table[bi]
	if c.stale[b] {
		return
	}
	base := b * c.bs
	if !c.cells.canonical(base, c.bs, int32(bi)*c.bs) || !c.chained(seq, bi) {
		return
	}
	parent := sq.root
	if bi > 0 {
		parent = c.hash[sq.table[bi-1]]
	}
	c.setKey(b, c.parentKey(seq, bi), c.bs)
	c.setHash(b, c.hashFn(c.seed, parent, c.cells.tokens(base, c.bs)), parent, int32(bi))
	c.emitStored(b, bi, sq.salt.Routing)
}

// chained reports whether the first bi blocks of seq's table form an intact hash chain from its
// start: each hashed, hashed as block number j of its sequence, and chained from the block
// before it. Only then were the cells after them computed from the canonical history the chain
// stands for: a block of the chain may keep its hash while an earlier one lost it (a cell
// removed in the middle) or sit at another slot (a range copy), and what follows it then saw a
// different history.
func (c *Manager) chained(seq, bi int) bool {
	t := c.seqs[seq].table
	parent := c.seqs[seq].root
	for j := range bi {
		b := t[j]
		if !c.hashed[b] || c.depth[b] != int32(j) || c.parent[b] != parent {
			return false
		}
		parent = c.hash[b]
	}
	return true
}

// prefixIndex maps a full block's chained hash to the one block that answers for it, its
// entry: of live or cached duplicates (same content) only one is. Per block, by block id,
// whether it is its hash's entry.
type prefixIndex struct {
	entry map[uint64]int32
	is    []bool
}

func newPrefixIndex(nBlocks int) prefixIndex {
	return prefixIndex{entry: make(map[uint64]int32, nBlocks), is: make([]bool, nBlocks)}
}

// clear empties the index.
func (x *prefixIndex) clear() {
	clear(x.entry)
	clear(x.is)
}

// lookup returns h's entry.
func (x *prefixIndex) lookup(h uint64) (int32, bool) {
	b, ok := x.entry[h]
	return b, ok
}

// holds reports whether b is its hash's entry.
func (x *prefixIndex) holds(b int32) bool { return x.is[b] }

// claim makes b, of hash h, h's entry if h has none.
func (x *prefixIndex) claim(b int32, h uint64) {
	if _, taken := x.entry[h]; !taken {
		x.entry[h], x.is[b] = b, true
	}
}

// drop takes b, h's entry, out of the index.
func (x *prefixIndex) drop(b int32, h uint64) {
	delete(x.entry, h)
	x.is[b] = false
}

// lookup returns the indexed block holding tokens as block number i of a sequence whose
// previous block has hash parent, with the hash it was found under. The block's tokens,
// positions and parent hash are checked, so a hash collision yields no match.
func (c *Manager) lookup(i int32, parent uint64, tokens []int32) (b int32, h uint64, ok bool) {
	h = c.hashFn(c.seed, parent, tokens)
	b, ok = c.index.lookup(h)
	if !ok || c.parent[b] != parent {
		return 0, 0, false
	}
	if c.cells.leading(b*c.bs, i*c.bs, tokens) != len(tokens) {
		return 0, 0, false
	}
	return b, h, true
}

// maxSiblings bounds how many hashed blocks chained from one parent a partial match compares
// (the most recently hashed first), so that a popular parent costs no more than a few blocks.
const maxSiblings = 8

// partial finds a block whose first m tokens (0 < m < BlockSize) continue a prefix as block
// number i, after full blocks ending with hash parent: among the children of parent (hashed
// blocks and kept partial blocks of freed sequences, keep.go) and the partially filled blocks
// that live sequences are writing at slot i after the same full blocks, the one sharing the most
// leading cells with tokens (tokens and positions checked). A new sequence can copy those m cells instead of computing them: prompts that share a
// system prompt rarely diverge at a block boundary, and n copies of one prompt share its partly
// filled last block. It returns m = 0 when there is none or when no block is available for the
// copy (the candidate itself, if cached, must not be the one evicted; taken cached blocks are
// about to be attached).
func (c *Manager) partial(i int32, parent uint64, tokens []int32, taken int) (src int32, m int) {
	limit := min(len(tokens), int(c.bs)-1)
	if limit <= 0 {
		return 0, 0
	}
	try := func(b int32, filled int) {
		if c.stale[b] {
			return
		}
		k := c.leadingCells(b, i, tokens[:min(limit, filled)])
		// On a tie prefer a live source: copying it needs no pin.
		if k > m || (k == m && k > 0 && c.ref[b] > 0 && c.ref[src] == 0) {
			src, m = b, k
		}
	}
	for b, n := c.kids.first(parent), 0; b >= 0 && n < maxSiblings; b, n = c.kids.after(b), n+1 {
		try(b, int(c.cellsIn(b)))
	}
	for s := range c.seqs {
		sq := &c.seqs[s]
		if len(sq.table) <= int(i) || c.hashed[sq.table[i]] {
			continue
		}
		if i == 0 && sq.root != parent {
			continue
		}
		if i > 0 && (c.hash[sq.table[i-1]] != parent || !c.chained(s, int(i))) {
			continue
		}
		try(sq.table[i], int(sq.n-i*c.bs))
	}
	need := 1
	if m > 0 && c.ref[src] == 0 {
		need = 2
	}
	if m == 0 || c.available()-taken < need {
		return 0, 0
	}
	return src, m
}

// leadingCells counts the leading cells of block b that hold tokens at positions i*BlockSize..
func (c *Manager) leadingCells(b, i int32, tokens []int32) int {
	return c.cells.leading(b*c.bs, i*c.bs, tokens)
}

// match finds the longest prefix of tokens the cache can provide to a sequence whose first block
// chains from root (its salt's): the full blocks with matching chained hashes and verified token
// ids, appended to c.matched, then possibly the first m cells of one more block src (see
// partial), which is kept available even when the matched blocks that are cached leave the pool.
func (c *Manager) match(root uint64, tokens []int32) (src int32, m int) {
	c.matched = c.matched[:0]
	parent, taken := root, 0
	for i := int32(0); ; i++ {
		n := len(c.matched) * int(c.bs)
		var b int32
		var h uint64
		ok := n+int(c.bs) <= len(tokens)
		if ok {
			b, h, ok = c.lookup(i, parent, tokens[n:n+int(c.bs)])
		}
		if !ok {
			return c.partial(i, parent, tokens[n:], taken)
		}
		if c.ref[b] == 0 {
			taken++
		}
		c.matched = append(c.matched, b)
		parent = h
	}
}

// MatchPrefix reports how many leading tokens are available from cached or live blocks: full
// blocks with matching chained hashes and verified token ids, then possibly the first cells of
// one more block (see partial).
func (c *Manager) MatchPrefix(tokens []int32) int {
	_, m := c.match(rootHash, tokens)
	return len(c.matched)*int(c.bs) + m
}

// AttachPrefix makes the empty sequence seq start with the tokens MatchPrefix(tokens) would
// count and returns their number: the full blocks are shared (refcount++, taken out of the LRU
// list if they were cached), the cells of a partial match are copied into a new block of seq's
// own (a KVCopy store operation). The caller then decodes tokens[n:] from position n. A caller that needs logits for the
// last prompt token must leave it out of tokens, so that at least one token remains to decode.
// The sequence is unsalted (see AttachPrefixSalt).
func (c *Manager) AttachPrefix(seq int, tokens []int32) (int, error) {
	return c.AttachPrefixSalt(seq, Salt{}, tokens)
}

// AttachPrefixSalt is AttachPrefix for a sequence salted salt: only blocks of that salt match,
// and the blocks seq then computes are of that salt.
func (c *Manager) AttachPrefixSalt(seq int, salt Salt, tokens []int32) (int, error) {
	c.gen++
	if seq < 0 || seq >= len(c.seqs) {
		return 0, fmt.Errorf("kvcache: AttachPrefix: sequence id %d outside [0, %d)", seq, len(c.seqs))
	}
	sq := &c.seqs[seq]
	if sq.n != 0 {
		return 0, fmt.Errorf("kvcache: AttachPrefix: sequence %d is not empty (%d cells)", seq, sq.n)
	}
	sq.salt, sq.root = salt, c.root(salt)
	src, m := c.match(sq.root, tokens)
	for _, b := range c.matched {
		c.pin(b)
		c.use(b)
		sq.table = append(sq.table, b)
	}
	n := len(c.matched) * int(c.bs)
	if m > 0 {
		c.use(src)
		// The copy is a store operation, applied in order before any forward pass writes: src
		// keeps its K/V until then even if it is evicted and reallocated meanwhile. It is only
		// kept out of this alloc, so that the copy does not take its own source.
		cached := c.ref[src] == 0
		if cached {
			c.cacheRemove(src)
		}
		nb := c.alloc()
		if cached {
			c.cachePush(src) // priced again: it was just used
		}
		c.copyCells(src, nb, int32(m))
		c.hold(nb, 1)
		sq.table = append(sq.table, nb)
		n += m
	}
	sq.n = int32(n)
	if n > 0 {
		sq.posMin, sq.posMax = 0, int32(n-1)
	}
	return n, nil
}
