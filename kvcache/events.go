package kvcache

// BlockEventKind says what happened to a block's prefix-cache entry.
type BlockEventKind uint8

const (
	// BlockStored: a full block got its chained hash and can now be matched as a prefix.
	BlockStored BlockEventKind = iota + 1
	// BlockRemoved: a block lost its hash (evicted for reuse, overwritten, shifted, cleared);
	// it can no longer be matched.
	BlockRemoved
)

// BlockEvent reports a change to the prefix cache, for Config.OnBlock. Several blocks may carry
// the same Hash at once (identical content computed by two sequences): each is reported
// separately, so a consumer that tracks hashes counts references.
type BlockEvent struct {
	Kind BlockEventKind
	// Hash is the cache's own chained hash of the block. It is seeded per cache, so it means
	// nothing outside this process: consumers use it as a key only.
	Hash uint64
	// Parent is the Hash of the block before it in the sequence (meaningless when Depth is 0).
	// Set for BlockStored.
	Parent uint64
	// Depth is the block's index in its sequence: it holds positions Depth*BlockSize onwards.
	// Set for BlockStored.
	Depth int
	// Tokens are the block's BlockSize token ids, for BlockStored. The slice is a view of the
	// cache's memory, valid only during the call.
	Tokens []int32
	// Root is the routing hash the sequence's chain starts from (its Salt's Routing;
	// prefixhash.Root unsalted), for BlockStored at Depth 0.
	Root uint64
}

// emitStored reports that block b, at slot bi of a sequence whose chain of routing hashes
// starts from root, was just hashed.
func (c *Manager) emitStored(b int32, bi int, root uint64) {
	if c.cfg.OnBlock == nil {
		return
	}
	base := b * c.bs
	c.cfg.OnBlock(BlockEvent{Kind: BlockStored, Hash: c.hash[b], Parent: c.parent[b], Depth: bi,
		Tokens: c.cells.tokens(base, c.bs), Root: root})
}

// emitRemoved reports that block b, still hashed, is about to lose its hash.
func (c *Manager) emitRemoved(b int32) {
	if c.cfg.OnBlock != nil {
		c.cfg.OnBlock(BlockEvent{Kind: BlockRemoved, Hash: c.hash[b]})
	}
}
