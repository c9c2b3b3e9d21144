package kvcache

import "fmt"

// A block's life: free (on c.free), held (ref > 0: in that many sequence tables), cached (ref
// 0, in the eviction heap: an indexed full block or a kept partial one). Exactly one of the
// three holds at any time (checkInvariants in the tests), and the free list and every
// per-block field (blockState) are written only here:
//
//   - alloc takes a free block, or evicts the cached block of lowest priority; the caller then
//     holds it (hold) or copies into it.
//   - hold gives a block fresh from alloc its first references; pin adds one to a held block or
//     takes a cached one out of the heap; split moves references of a shared block to its
//     copy-on-write copy.
//   - release drops one: a block left unreferenced is cached when it is (or can become) its
//     hash's index entry, and freed otherwise (freeBlock); drop hands the last one to keep, which
//     caches the block as a partial one (setKept) or frees it; uncache frees a cached block.
//   - use counts a sequence that takes a block (its eviction priority, evict.go).
//   - markStale marks a block whose K/V a fresh decode of its tokens would not give; alloc
//     clears the mark.
//   - setHash gives a full block its chained hash and, when the hash has no entry, the prefix
//     index's entry (indexIfFree, also for a released block or a duplicate promoted in its
//     twin's place); unhash takes it out of both.

// blockState is the state of every block, indexed by block id, with the free list and the
// eviction order; Manager embeds it. A new per-block field is declared, allocated and reset
// here. Its methods (available, hold, pin, split, freeBlock, use, drop, markStale, and
// evict.go's cachePush, cacheRemove, evict) touch only this state; the steps of a block's life
// that also reach the prefix index, the tiers or OnBlock (alloc, release, uncache, setKept,
// setHash, unhash, forgetAll) are the Manager's.
type blockState struct {
	ref    []int32  // the sequence tables that hold the block
	hash   []uint64 // chained hash; meaningful only when hashed
	parent []uint64 // the parent hash the block's hash was chained from, to verify matches
	hashed []bool   // hash describes the block's current content (full, canonical positions)
	// stale: the block's K/V may differ from what a fresh decode of its tokens gives (keys
	// re-rotated by SeqShift, cells whose forward pass failed): never hashed nor copied by a
	// partial match. Cleared when the block is allocated again.
	stale []bool
	// part: the cells of a kept partial block, the last, partly filled block of a freed
	// sequence, cached for partial matches (keep.go); 0 for every other block.
	part  []int32
	depth []int32 // index in its sequence's table when hashed
	hits  []int32 // sequences that used the block since it was allocated (see evict.go)

	free []int32    // stack of blocks with refcount 0 that hold nothing reusable
	evq  evictOrder // the cached blocks (evict.go)
}

func newBlockState(n int) blockState {
	return blockState{ref: make([]int32, n), hash: make([]uint64, n), parent: make([]uint64, n),
		hashed: make([]bool, n), stale: make([]bool, n), part: make([]int32, n),
		depth: make([]int32, n), hits: make([]int32, n),
		free: make([]int32, 0, n), evq: newEvictOrder(n)}
}

// reset makes b hold nothing: no reference, no hash, not stale, not kept.
func (s *blockState) reset(b int32) {
	s.ref[b] = 0
	s.hashed[b], s.stale[b] = false, false
	s.part[b] = 0
}

// available is the number of blocks an allocation may take (free, then evicted cached ones).
func (s *blockState) available() int { return len(s.free) + s.evq.len() }

// canAlloc is the check that goes with alloc: nil when need blocks can be allocated, else
// ErrKVFull with both counts, which the caller wraps with what needed them. An operation calls
// it once for all its blocks, before changing anything. It allocates only when it fails.
func (c *Manager) canAlloc(need int) error {
	if avail := c.available(); need > avail {
		return fmt.Errorf("%w: %d needed, %d available", ErrKVFull, need, avail)
	}
	return nil
}

// alloc takes a free block, or evicts the cached one of lowest priority (evict.go); the caller
// has checked canAlloc (or available()) and holds it (hold) or copies into it. The block's
// cells are marked empty, and it is not stale.
func (c *Manager) alloc() int32 {
	var b int32
	if n := len(c.free); n > 0 {
		b = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		b = c.evict()
		c.spill(b, false) // to another tier, if one takes it (tier.go)
		c.unhash(b)
	}
	c.cells.emptyRange(b*c.bs, c.bs)
	c.stale[b] = false
	c.hits[b] = 1
	return b
}

// hold gives b, fresh from alloc (no reference yet), its first k references: k tables hold it.
func (s *blockState) hold(b, k int32) { s.ref[b] = k }

// pin takes one more reference to b, out of the eviction heap if it was cached.
func (s *blockState) pin(b int32) {
	if s.ref[b] == 0 {
		s.cacheRemove(b)
	}
	s.ref[b]++
}

// split moves k of b's references to nb, b's copy fresh from alloc: the k tables that held b
// now hold nb. b keeps at least one (it had more than k).
func (s *blockState) split(b, nb, k int32) {
	s.ref[b] -= k
	s.ref[nb] = k
}

// release drops one reference to b. A block left unreferenced is kept as a cached block when it
// is (or can become) the index entry for its hash, and freed otherwise.
func (c *Manager) release(b int32) {
	c.ref[b]--
	if c.ref[b] > 0 {
		return
	}
	if c.hashed[b] && !c.index.holds(b) {
		c.indexIfFree(b)
	}
	if c.index.holds(b) {
		c.cachePush(b)
		return
	}
	c.unhash(b)
	c.freeBlock(b)
}

// freeBlock puts b, unreferenced, neither cached nor hashed, on the free list.
func (s *blockState) freeBlock(b int32) { s.free = append(s.free, b) }

// uncache takes the cached block b out of the cache (the eviction order, its hash or its place
// among its parent's children) and frees it.
func (c *Manager) uncache(b int32) {
	c.cacheRemove(b)
	c.unhash(b)
	c.freeBlock(b)
}

// setKept makes the unreferenced block b a kept partial block (keep.go): its first count cells,
// block number depth of its sequence, chained from parent. It joins parent's children and the
// cache.
func (c *Manager) setKept(b, count int32, parent uint64, depth int32) {
	c.part[b], c.parent[b], c.depth[b] = count, parent, depth
	c.linkChild(b)
	c.cachePush(b)
}

// use counts one more sequence that took b since it was allocated (its eviction priority).
func (s *blockState) use(b int32) { s.hits[b]++ }

// drop takes b's one reference away without caching or freeing it: keep caches it next, as a
// kept partial block.
func (s *blockState) drop(b int32) { s.ref[b] = 0 }

// markStale marks b's K/V as not what a fresh decode of its tokens gives (re-rotated keys,
// cells whose forward pass failed): it is never hashed nor copied by a partial match until it
// is allocated again.
func (s *blockState) markStale(b int32) { s.stale[b] = true }

// setHash records h as b's content hash, chained from parent as block depth of its
// sequence: b joins its parent's children and, when no block holds h's index entry, takes it.
func (c *Manager) setHash(b int32, h, parent uint64, depth int32) {
	c.hash[b], c.parent[b], c.hashed[b], c.depth[b] = h, parent, true, depth
	c.linkChild(b)
	c.indexIfFree(b)
}

// indexIfFree makes the hashed block b its hash's prefix index entry when no block is.
func (c *Manager) indexIfFree(b int32) {
	c.index.claim(b, c.hash[b])
}

// unhash forgets b's content hash, removing it from the prefix index, or, for a kept partial
// block, its place among its parent's children. b must not be cached.
func (c *Manager) unhash(b int32) {
	if c.part[b] > 0 {
		c.unlinkChild(b)
		c.part[b] = 0
		return
	}
	if !c.hashed[b] {
		return
	}
	if c.index.holds(b) {
		c.index.drop(b, c.hash[b])
		c.promoteDuplicate(b)
	}
	c.unlinkChild(b)
	c.emitRemoved(b)
	c.hashed[b] = false
}

// forgetAll makes every block one that holds nothing, telling OnBlock of each hash, and frees
// it, block 0 on top so that allocation goes in address order; then empties the eviction order,
// the index and the lists of children (Clear).
func (c *Manager) forgetAll() {
	c.free = c.free[:0]
	for b := int32(len(c.ref)) - 1; b >= 0; b-- {
		if c.hashed[b] {
			c.emitRemoved(b)
		}
		c.blockState.reset(b)
		c.freeBlock(b)
	}
	c.index.clear()
	c.kids.clear()
	c.evq.clear()
}
