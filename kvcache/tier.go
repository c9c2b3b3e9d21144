package kvcache

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// Tiers beyond RAM. A block leaving RAM (evicted from the prefix cache, or a preempted
// sequence swapped out) can be written to another tier (disk: package kvdisk; a saved slot), and
// blocks found there can come back (Import) instead of being recomputed. The manager holds no
// bytes and does no I/O: it decides, as store operations in the one ordered list, that cells be
// read out into an image (KVSave) or written from one (KVLoad), and describes the blocks saved
// (TakeSpills); the engine supplies the images (batch.KV.Images) and talks to the tiers.
//
// Blocks are named across processes by a Key: SHA-256 chained over the parent block's key and
// the block's token ids (ChainKey). Unlike the seeded in-RAM hash, a key is the same in every
// process, so a file written before a restart, or a block a peer holds, is found by it; being a
// cryptographic hash, it cannot be collided by a client choosing prompts. Matches are verified
// against the tokens besides.

// Key names a block across processes: SHA-256 over the parent block's Key (RootKey for a
// sequence's first block) and the block's token ids (int32 little-endian). A full block and a
// partial one with the same leading tokens differ (the token count is part of the input).
type Key [32]byte

// RootKey is the parent Key of a sequence's first block: all zero bytes. A Key is never zero in
// practice, so a zero Key also means "none".
var RootKey Key

// ChainKey returns the Key of a block holding toks after the block whose Key is parent.
func ChainKey(parent Key, toks []int32) Key {
	buf := make([]byte, 0, len(parent)+4*len(toks))
	return chainKey(buf, parent, toks)
}

func chainKey(buf []byte, parent Key, toks []int32) Key {
	buf = append(buf[:0], parent[:]...)
	for _, t := range toks {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
	}
	return sha256.Sum256(buf)
}

// ChainKeys appends to dst the Keys of the full blocks of tokens in blocks of bs (len(tokens)/bs
// of them) and returns it.
func ChainKeys(dst []Key, tokens []int32, bs int) []Key {
	return ChainKeysFrom(dst, RootKey, tokens, bs)
}

// ChainKeysFrom is ChainKeys for a chain whose first block's parent is root (a Salt's Key).
func ChainKeysFrom(dst []Key, root Key, tokens []int32, bs int) []Key {
	parent := root
	buf := make([]byte, 0, len(parent)+4*bs)
	for i := 0; (i+1)*bs <= len(tokens); i++ {
		parent = chainKey(buf, parent, tokens[i*bs:(i+1)*bs])
		dst = append(dst, parent)
	}
	return dst
}

// Spill describes a block whose cells a KVSave operation reads out into image Img: its Key, the
// Key of the block before it (its salt's Key, RootKey unsalted, at Depth 0), its index in its sequence (positions
// Depth*BlockSize onwards, in order) and its tokens (len BlockSize for a full block, fewer for a
// kept partial one). Tokens is a view valid until the next mutating call.
type Spill struct {
	Key, Parent Key
	Depth       int32
	Tokens      []int32
	Img         int32
	Swap        bool // written because its sequence was swapped out (SpillSeq), not evicted
}

// tierState is what the Manager keeps for spilling to other tiers: every block's Key and the
// Key of the block before it (nil until SetSpill), the spill filter, the blocks whose KVSave
// operations are pending (their tokens in spillToks) and scratch.
type tierState struct {
	want      func(Key) bool
	key, pkey []Key // per block
	keyBuf    []byte
	spills    []spillRec
	spillToks []int32
	pinned    []int32 // Import's scratch
}

type spillRec struct {
	key, parent Key
	depth       int32
	off, n      int32 // tokens in spillToks
	img         int32
	swap        bool
}

// SetSpill turns the tiers on: from now on every hashed block (and kept partial block) gets its
// Key, and when the prefix cache evicts one for which want(key) is true (the tier does not hold
// it yet and can take it), a KVSave operation reads its cells out and TakeSpills describes it.
// nil turns spilling off (keys are still computed). Call it before any block is hashed; blocks
// hashed before have no Key and are never spilled.
func (c *Manager) SetSpill(want func(Key) bool) {
	c.tier.want = want
	if c.tier.key == nil {
		c.tier.key = make([]Key, len(c.ref))
		c.tier.pkey = make([]Key, len(c.ref))
		c.tier.keyBuf = make([]byte, 0, len(Key{})+4*int(c.bs))
	}
}

// BlockKey returns the Key of block b (hashed or kept partial), and false when it has none.
func (c *Manager) BlockKey(b int32) (Key, bool) {
	if c.tier.key == nil || b < 0 || int(b) >= len(c.tier.key) || (!c.hashed[b] && c.part[b] == 0) || c.tier.key[b] == RootKey {
		return Key{}, false
	}
	return c.tier.key[b], true
}

// setKey gives block b, chained after the block with Key parent, the Key of its first n cells.
func (c *Manager) setKey(b int32, parent Key, n int32) {
	if c.tier.key == nil {
		return
	}
	base := b * c.bs
	c.tier.pkey[b] = parent
	c.tier.key[b] = chainKey(c.tier.keyBuf, parent, c.cells.tokens(base, n))
}

// parentKey is the Key of slot bi-1 of seq's table, its salt's Key (RootKey unsalted) for bi 0.
func (c *Manager) parentKey(seq, bi int) Key {
	if c.tier.key == nil {
		return RootKey
	}
	if bi == 0 {
		return c.seqs[seq].salt.Key
	}
	return c.tier.key[c.seqs[seq].table[bi-1]]
}

// spill records a KVSave of block b's content (it is about to be evicted, or swapped out) when
// it has a Key and want says the tier takes it.
func (c *Manager) spill(b int32, swap bool) bool {
	if !c.hashed[b] && c.part[b] == 0 {
		return false
	}
	return c.spillAs(b, c.depth[b], c.cellsIn(b), swap)
}

// spillAs is spill of b's first n cells as block number depth of its sequence: b need not be
// hashed nor kept yet (SpillSeq's last, partly filled block).
func (c *Manager) spillAs(b, depth, n int32, swap bool) bool {
	if c.tier.want == nil || c.stale[b] || c.tier.key[b] == RootKey || !c.tier.want(c.tier.key[b]) {
		return false
	}
	base := b * c.bs
	off := int32(len(c.tier.spillToks))
	c.tier.spillToks = append(c.tier.spillToks, c.cells.tokens(base, n)...)
	img := c.ops.save(base, n)
	c.tier.spills = append(c.tier.spills, spillRec{key: c.tier.key[b], parent: c.tier.pkey[b], depth: depth, off: off, n: n, img: img, swap: swap})
	return true
}

// TakeSpills appends the blocks of the KVSave operations decided since the last call (or
// Clear) to dst and returns it. Call it right after Schedule (or TakeOps), whose operations
// they go with: their images are numbered within that step's batch.KV.Images.
func (c *Manager) TakeSpills(dst []Spill) []Spill {
	for _, r := range c.tier.spills {
		dst = append(dst, Spill{Key: r.key, Parent: r.parent, Depth: r.depth, Tokens: c.tier.spillToks[r.off : r.off+r.n : r.off+r.n],
			Img: r.img, Swap: r.swap})
	}
	c.tier.spills = c.tier.spills[:0]
	c.tier.spillToks = c.tier.spillToks[:0]
	return dst
}

// SpillSeq swaps seq out: it records a KVSave of every block of seq that has a Key and that want
// accepts (its full hashed blocks, and its last, partly filled block when it would be kept as a
// partial block), changing nothing else; the caller then frees seq as usual. It returns the
// number of blocks and cells spilled.
func (c *Manager) SpillSeq(seq int) (blocks, cells int) {
	c.gen++
	if seq < 0 || seq >= len(c.seqs) || c.tier.want == nil {
		return 0, 0
	}
	sq := &c.seqs[seq]
	for bi, b := range sq.table {
		count := min(c.bs, sq.n-int32(bi)*c.bs)
		if !c.hashed[b] && c.part[b] == 0 {
			if count >= c.bs || !c.keepable(seq, bi, count) {
				continue
			}
			// Not kept yet (that happens when seq is freed): give the partial block its Key now.
			c.setKey(b, c.parentKey(seq, bi), count)
			if c.spillAs(b, int32(bi), count, true) {
				blocks++
				cells += int(count)
			}
			continue
		}
		if c.spill(b, true) {
			blocks++
			cells += int(c.cellsIn(b))
		}
	}
	return blocks, cells
}

// ImportBlock is one block Import brings into the prefix cache: block number Depth of the
// prompt, its first Cells cells (BlockSize for a full block; fewer only for the last one).
type ImportBlock struct {
	Depth, Cells int32
}

// Import makes blocks another tier holds part of the prefix cache, as if they had been
// computed here, so that CanAdmit and Admit then find them: blocks, in chain order, hold
// prompt[Depth*BlockSize : Depth*BlockSize+Cells] (the caller has checked the tier's tokens and
// positions against prompt). Walking prompt's chain from its start, a block the cache already
// holds is kept, and a missing one is taken from blocks when it is next there (a gap ends the
// walk): a free or evicted block gets the cells' positions and tokens, its hash and Key, and a
// KVLoad operation writing its K/V from an image. Import appends one entry per block to imgs:
// the image index of its KVLoad (the caller puts the block's bytes in batch.KV.Images at that
// index for the step these operations go with), or -1 for a block not loaded (the cache held
// it already, or the walk ended before it). The imported blocks are left cached (refcount 0,
// priced as used once), a partial last block as a kept partial block. It returns imgs and the
// prompt tokens the cache now holds in a row from the start. The chain is salt's: blocks of
// another salt are not found, and the blocks imported are of salt.
func (c *Manager) Import(salt Salt, prompt []int32, blocks []ImportBlock, imgs []int32) ([]int32, int) {
	c.gen++
	first := len(imgs)
	for range blocks {
		imgs = append(imgs, -1)
	}
	pinned := c.tier.pinned[:0]
	parent, pk := c.root(salt), salt.Key
	held := 0
	next := 0
	for i := int32(0); ; i++ {
		lo := int(i) * int(c.bs)
		if lo+int(c.bs) <= len(prompt) {
			if b, h, ok := c.lookup(i, parent, prompt[lo:lo+int(c.bs)]); ok {
				for next < len(blocks) && blocks[next].Depth <= i {
					next++ // held already: its image stays -1
				}
				c.pin(b)
				pinned = append(pinned, b)
				parent, held = h, lo+int(c.bs)
				if c.tier.key != nil {
					pk = c.tier.key[b]
				}
				continue
			}
		}
		if next >= len(blocks) || blocks[next].Depth != i || c.available() == 0 {
			break
		}
		ib := blocks[next]
		slot := first + next
		next++
		if ib.Cells <= 0 || ib.Cells > c.bs || lo+int(ib.Cells) > len(prompt) {
			break
		}
		b := c.alloc()
		base := b * c.bs
		for j := range ib.Cells {
			c.cells.set(base+j, i*c.bs+j, prompt[lo+int(j)])
		}
		imgs[slot] = c.ops.load(base, ib.Cells)
		if ib.Cells < c.bs { // a partial block ends the chain
			c.setKey(b, pk, ib.Cells)
			c.keep(b, i, ib.Cells, parent)
			held = lo + int(ib.Cells)
			break
		}
		h := c.hashFn(c.seed, parent, c.cells.tokens(base, c.bs))
		c.setKey(b, pk, c.bs)
		c.setHash(b, h, parent, i)
		c.emitStored(b, int(i), salt.Routing)
		c.hold(b, 1)
		pinned = append(pinned, b)
		parent, held = h, lo+int(c.bs)
		if c.tier.key != nil {
			pk = c.tier.key[b]
		}
	}
	for k := len(pinned) - 1; k >= 0; k-- { // deepest first, as freeSeq releases
		c.release(pinned[k])
	}
	c.tier.pinned = pinned[:0]
	return imgs, held
}

// CachedBlock is one block of a prefix as Prefix finds it in the cache: its cell range and Key.
type CachedBlock struct {
	Key, Parent Key
	Depth       int32
	Cell, N     int32 // cells [Cell, Cell+N)
}

// Prefix appends to dst the blocks the cache holds (live or cached) for the longest prefix of
// tokens it can provide: full blocks by hash, then a partial block whose leading cells continue
// it (as MatchPrefix counts, but only a block those cells start; a partial match's source of
// more cells is cut to the ones that match). It changes nothing. Used to save a slot. Only
// blocks of salt are found.
func (c *Manager) Prefix(dst []CachedBlock, salt Salt, tokens []int32) []CachedBlock {
	src, m := c.match(c.root(salt), tokens)
	pk := salt.Key
	for i, b := range c.matched {
		k := Key{}
		if c.tier.key != nil {
			k = c.tier.key[b]
		}
		dst = append(dst, CachedBlock{Key: k, Parent: pk, Depth: int32(i), Cell: b * c.bs, N: c.bs})
		pk = k
	}
	if m > 0 && !c.stale[src] {
		d := int32(len(c.matched))
		toks := tokens[int(d)*int(c.bs) : int(d)*int(c.bs)+m]
		dst = append(dst, CachedBlock{Key: ChainKey(pk, toks), Parent: pk, Depth: d, Cell: src * c.bs, N: int32(m)})
	}
	return dst
}

// SaveCells records a KVSave of cells [cell, cell+n) into a new image and returns its index (in
// the images of the operations TakeOps or Schedule hands over next). For saving what Prefix
// found.
func (c *Manager) SaveCells(cell, n int32) (int32, error) {
	if n <= 0 || n > c.bs || cell < 0 || int(cell)+int(n) > c.cells.n() {
		return 0, fmt.Errorf("kvcache: SaveCells: cells [%d, %d) outside the cache", cell, cell+n)
	}
	return c.ops.save(cell, n), nil
}

// SpillCached records a KVSave of up to max cached blocks (refcount 0, kept for prefix reuse)
// that have a Key and that the spill filter accepts, from the most valuable (the last to be
// evicted) down, changing nothing else: to write the prefix cache out before a shutdown. It
// returns the number spilled; call it again (after handing those over) until it returns 0.
func (c *Manager) SpillCached(max int) int {
	c.gen++
	if c.tier.want == nil {
		return 0
	}
	n := 0
	cached := c.evq.blocks()
	for i := len(cached) - 1; i >= 0 && n < max; i-- {
		if c.spill(cached[i], false) {
			n++
		}
	}
	return n
}
