// Package kvcache is the bookkeeping of a paged, multi-sequence key/value cache for transformer
// attention, with copy-on-write sharing between sequences and automatic prefix caching across
// requests: a Manager, in the manner of nano-vllm's and vLLM's block managers. It holds no K/V
// memory (that is package kvstore's Store, owned by the runner): it decides which cell every
// token's K and V go to and which cells must be copied or re-rotated, and hands that to the
// store as a step's schedule (batch.KV: a slot mapping, the block tables and the store
// operations).
//
// # Layout
//
// Memory is a pool of NumBlocks blocks of BlockSize cells; cell c lives in block c/BlockSize at
// offset c%BlockSize. The store holds, for every layer, a K and a V row per cell (see kvstore).
// BlockSize defaults to 16: small enough that prompts sharing a prefix share all but at most 15
// of its cells and that a sequence's partially filled last block wastes at most 15 cells, large
// enough that the per-block bookkeeping (a refcount, a hash, LRU links, one table entry per
// sequence) is negligible next to 16 cells × layers × KVDim × 2 values on a CPU.
//
// # Bookkeeping
//
// Everything is plain slices indexed by cell or block id, in the spirit of llama.cpp's
// llama-kv-cells.h. Per cell (cellState, cells.go): its position (-1 = empty) and token id.
// The store operations the bookkeeping decides are an opList (ops.go). Per block (blockState,
// blocks.go, the one writer of refcounts): a refcount (the number of sequence block tables that
// hold it) and a chained content hash; the eviction order (evictOrder), the prefix index
// (prefixIndex) and the lists of children of each parent hash (children) are types of their
// own that the Manager composes. Per sequence: a block table and nCells,
// the logical length (SeqLen); the sequence's cells are the first nCells slots of its table, in
// order, and may contain holes (empty cells) after SeqRemove or SeqShift. A sequence never holds
// the same block twice; len(table) == ceil(nCells/BlockSize); when nCells > 0 its last slot is
// not empty (trailing holes are trimmed).
//
// Blocks are shared by refcount: SeqCopy and tokens decoded for several sequences at once make
// tables point at the same blocks, and a sequence about to change a block that other tables
// also hold copies it first (copy-on-write), so what one sequence sees never changes because of
// another.
//
// # Store operations
//
// Every change of K/V content the bookkeeping implies (a copy-on-write or partial-match copy, a
// cell moved or a key re-rotated by a shift) is appended, in order, to the pending operations
// (batch.KVOp) and done by the store when it applies them: Schedule hands them over with the
// step's cells (TakeOps for other callers), and the store applies them all before the step's
// forward passes. Because every K/V change goes through that one ordered list and forward passes
// only write the cells of their own step, a copy's source holds at application time exactly what
// it held when the copy was decided: no block has to be pinned in between.
//
// # Reading for attention
//
// A token of sequence s at position p attends to every cell among the first SeqLen(s) slots of
// Blocks(s) whose Pos is in [0, p]; slot i is cell Blocks(s)[i/BlockSize]*BlockSize +
// i%BlockSize. Empty cells (holes) have Pos -1. Schedule passes these views in batch.KV.
//
// # Prefix caching
//
// A full block whose cells hold positions i*BlockSize.. (i = its index in the table) of a
// sequence whose earlier blocks are hashed likewise, and none of whose keys was re-rotated by
// SeqShift (only approximately what a fresh decode computes), gets a chained hash (hash of the parent
// block's hash and its BlockSize token ids) and is registered in a prefix index. When its
// refcount drops to 0 it is not freed but kept, with its K/V, as a cached block;
// Admit/AttachPrefix let a new sequence start from such blocks (or from live ones) instead
// of recomputing them. Allocation takes free (never used or unhashed) blocks first and then
// evicts the cached block of lowest priority, which weighs how often and how recently it was
// used and how deep in its prefix it is (evict.go), so a system prompt every request shares
// outlives one-off prompts and a prefix loses its deepest blocks first. A block's hash is dropped as
// soon as its content changes (a write into it, a removed cell, a shift). A match is verified
// beyond the 64-bit hash: the block's token ids, positions and parent hash must all agree. When
// two live blocks have the same content only one is in the index; the other takes its place when
// released, if the entry is free by then. Where a prompt diverges inside a block, the first cells
// of a block chained from the same parent (tokens and positions verified) are copied into a new
// block of the sequence's own: prompts that share a system prompt rarely part at a block
// boundary. The candidates are the hashed blocks chained from that parent (every one, duplicates
// included, is on its parent's list of children, so releasing a duplicate never hides the
// original), the partly filled blocks live sequences are writing after the same full blocks,
// so that n copies of one prompt share its last, partial block too, and the kept partial blocks:
// when a sequence is freed, its last, partly filled block (not stale, canonical positions, on an
// intact hash chain) stays cached with its cells, tokens and positions, chained from its
// parent's hash, under the eviction policy of full blocks (keep.go), since every chat turn ends
// in one and the next turn starts with it.
//
// # Concurrency
//
// A Manager is not safe for concurrent use: one goroutine (the engine's step loop, or a
// runner.Session) owns it. The views Schedule puts in batch.KV may be read concurrently (by
// forward-pass workers) until the next mutating call.
package kvcache

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"

	"ubatch/batch"
	"ubatch/kvformat"
	"ubatch/quant"
)

// DefaultBlockSize is the block size used when Config.BlockSize is 0.
const DefaultBlockSize = 16

// Config describes a cache: the Manager's blocks and sequences, and the layout of the store it
// plans for (NLayers, KVDim, DType: kvstore.New takes the same Config, and NewManager checks
// them, so that a manager and a store made from one Config agree). All counts must be positive
// (BlockSize 0 means DefaultBlockSize).
type Config struct {
	NLayers, KVDim int // KVDim = n_kv_heads * head_dim
	// KVDims, when not nil, is each layer's row width (len NLayers; Gemma 4's full and sliding
	// layers differ) and KVDim their largest; nil: KVDim for every layer.
	KVDims               []int
	BlockSize, NumBlocks int
	DType                quant.Type // a KV format (package kvformat): F16, F32 or Q8_0
	MaxSeqs              int        // sequence ids are in [0, MaxSeqs)
	// OnBlock, when set, is called on every prefix-cache change (see BlockEvent), synchronously
	// from the mutating call, so it must return quickly and must not call the cache.
	OnBlock func(BlockEvent)
}

// ErrKVFull reports that an operation needs more blocks than are free or evictable. The cache
// is left unchanged. Callers test for it with errors.Is.
var ErrKVFull = errors.New("kvcache: not enough free blocks")

// Manager is the bookkeeping of a paged KV cache. See the package documentation for layout and
// semantics.
type Manager struct {
	cfg Config
	bs  int32 // BlockSize

	cells cellState // per cell (cells.go)

	blockState // per block (blocks.go)

	index   prefixIndex // hash -> the block that answers for it (prefix.go)
	kids    children    // per parent hash, the blocks chained from it (children.go)
	matched []int32     // scratch of match

	seqs []seqTable

	seed   maphash.Seed
	hashFn func(seed maphash.Seed, parent uint64, toks []int32) uint64 // replaceable in tests

	sim      simScratch
	oldTable []int32 // SeqDiscard's copy of the table it compacts
	rotated  []int32 // SeqDiscard's cells whose keys it re-rotates
	fill     []int32 // per block, for Stats

	ops opList // store operations decided and not yet handed over (ops.go)

	tier tierState // spilling to other tiers (tier.go)
	// gen counts mutating calls; planGen/planFor record the last successful CanSchedule, so that
	// Schedule right after it does not plan the same batch again.
	gen     uint64
	planGen uint64
	planFor *batch.Batch
	planLen int
}

type seqTable struct {
	table          []int32
	n              int32   // logical length in cells, holes included
	posMin, posMax int32   // over non-empty cells; -1 when the sequence is empty
	intent         []int32 // the tokens Admit started the sequence with (computed or about to be)
	expect         int32   // the cells Admit expects it to reach: intent plus the reserve
	// salt is the namespace of the sequence's blocks (salt.go), set when it starts
	// (AttachPrefix, Admit, SeqCopy); root is the seeded hash its first block chains from.
	salt Salt
	root uint64
}

// Check returns cfg with its defaults applied (BlockSize 0: DefaultBlockSize), or an error for
// a non-positive count, an unknown DType, a Q8_0 KVDim that is not a multiple of 32 or a size
// whose cell indices would not fit in int32. NewManager and kvstore.New check their Config so.
func (cfg Config) Check() (Config, error) {
	if cfg.BlockSize == 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	switch {
	case cfg.NLayers <= 0:
		return cfg, fmt.Errorf("kvcache: NLayers %d must be positive", cfg.NLayers)
	case cfg.KVDim <= 0:
		return cfg, fmt.Errorf("kvcache: KVDim %d must be positive", cfg.KVDim)
	case cfg.BlockSize < 0:
		return cfg, fmt.Errorf("kvcache: BlockSize %d must be positive", cfg.BlockSize)
	case cfg.NumBlocks <= 0:
		return cfg, fmt.Errorf("kvcache: NumBlocks %d must be positive", cfg.NumBlocks)
	case cfg.MaxSeqs <= 0:
		return cfg, fmt.Errorf("kvcache: MaxSeqs %d must be positive", cfg.MaxSeqs)
	case cfg.MaxSeqs > math.MaxInt32:
		return cfg, fmt.Errorf("kvcache: MaxSeqs %d does not fit in int32", cfg.MaxSeqs)
	}
	f := kvformat.Of(cfg.DType)
	switch {
	case f == nil:
		return cfg, fmt.Errorf("kvcache: unsupported DType %v: use %s", cfg.DType, kvformat.Names())
	case cfg.KVDim%f.Align() != 0:
		return cfg, fmt.Errorf("kvcache: a %v cache needs a KV width (kv heads × head dim) that is a multiple of %d, this model's is %d: use F16", cfg.DType, f.Align(), cfg.KVDim)
	case cfg.KVDims != nil && len(cfg.KVDims) != cfg.NLayers:
		return cfg, fmt.Errorf("kvcache: %d KVDims for %d layers", len(cfg.KVDims), cfg.NLayers)
	}
	for l, d := range cfg.KVDims {
		switch {
		case d <= 0 || d > cfg.KVDim:
			return cfg, fmt.Errorf("kvcache: layer %d's KV width %d is not in [1, KVDim %d]", l, d, cfg.KVDim)
		case d%f.Align() != 0:
			return cfg, fmt.Errorf("kvcache: a %v cache needs a KV width (kv heads × head dim) that is a multiple of %d, layer %d's is %d: use F16", cfg.DType, f.Align(), l, d)
		}
	}
	if int64(cfg.NumBlocks)*int64(cfg.BlockSize) > math.MaxInt32 {
		return cfg, fmt.Errorf("kvcache: %d blocks of %d cells exceed the int32 cell index range",
			cfg.NumBlocks, cfg.BlockSize)
	}
	return cfg, nil
}

// LayerDim is layer l's row width: KVDims[l], or KVDim when KVDims is nil.
func (cfg *Config) LayerDim(l int) int {
	if cfg.KVDims != nil {
		return cfg.KVDims[l]
	}
	return cfg.KVDim
}

// NewManager allocates the bookkeeping of a cache (no K/V memory: see kvstore.New). It returns an
// error for a non-positive count, an unknown DType, a Q8_0 KVDim that is not a multiple of 32 or
// a size whose cell indices would not fit in int32.
func NewManager(cfg Config) (*Manager, error) {
	cfg, err := cfg.Check()
	if err != nil {
		return nil, err
	}
	nCells := cfg.NumBlocks * cfg.BlockSize
	if nCells > math.MaxInt/cfg.KVDim/2/cfg.NLayers {
		return nil, fmt.Errorf("kvcache: %d cells of %d values in %d layers overflow int", nCells, cfg.KVDim, cfg.NLayers)
	}
	c := &Manager{
		cfg:        cfg,
		bs:         int32(cfg.BlockSize),
		cells:      newCellState(nCells),
		blockState: newBlockState(cfg.NumBlocks),
		kids:       newChildren(cfg.NumBlocks),
		index:      newPrefixIndex(cfg.NumBlocks),
		seqs:       make([]seqTable, cfg.MaxSeqs),
		seed:       maphash.MakeSeed(),
		hashFn:     chainHash,
		oldTable:   make([]int32, 0, cfg.NumBlocks),
		rotated:    make([]int32, 0, nCells),
		fill:       make([]int32, cfg.NumBlocks),
	}
	c.sim.init(cfg.MaxSeqs, cfg.NumBlocks)
	c.Clear()
	return c, nil
}

// Config returns the configuration, with defaults applied.
func (c *Manager) Config() Config { return c.cfg }

// Blocks returns seq's block table (nil for an unknown seq). The slice is a read-only view,
// valid until the next mutating call.
func (c *Manager) Blocks(seq int) []int32 {
	if seq < 0 || seq >= len(c.seqs) {
		return nil
	}
	return c.seqs[seq].table
}

// SeqLen returns seq's logical length in cells, holes included: its cells are the first
// SeqLen(seq) slots of Blocks(seq). 0 for an unknown seq. For a sequence without holes (the
// engine's: only SeqDiscard, which compacts, removes cells) it is the number of its tokens in
// the cache, those of a step Schedule planned included.
func (c *Manager) SeqLen(seq int) int {
	if seq < 0 || seq >= len(c.seqs) {
		return 0
	}
	return int(c.seqs[seq].n)
}

// Pos returns the position stored in cell, or -1 if the cell is empty or out of range. Only
// cells within some sequence's first SeqCells slots are meaningful: cells past a sequence's end
// may hold stale positions.
func (c *Manager) Pos(cell int32) int32 {
	if !c.cells.in(cell) {
		return -1
	}
	return c.cells.pos(cell)
}

// Token returns the token id recorded for cell (meaningful when Pos(cell) >= 0), or -1 if cell
// is out of range.
func (c *Manager) Token(cell int32) int32 {
	if !c.cells.in(cell) {
		return -1
	}
	return c.cells.tok(cell)
}

// SeqPosMax returns the largest position among seq's cells, -1 if it has none.
func (c *Manager) SeqPosMax(seq int) int32 {
	if seq < 0 || seq >= len(c.seqs) {
		return -1
	}
	return c.seqs[seq].posMax
}

// SeqPosMin returns the smallest position among seq's cells, -1 if it has none.
func (c *Manager) SeqPosMin(seq int) int32 {
	if seq < 0 || seq >= len(c.seqs) {
		return -1
	}
	return c.seqs[seq].posMin
}

// Stats is a snapshot of block usage. Used+Cached+Free == Total.
type Stats struct {
	BlockSize int
	Total     int // NumBlocks
	Used      int // refcount > 0
	Shared    int // refcount > 1 (a subset of Used)
	Cached    int // refcount 0, content kept for prefix reuse (evictable)
	Free      int // refcount 0, nothing reusable
	UsedCells int // distinct non-empty cells visible to at least one sequence
}

// Stats counts blocks and cells. It costs O(NumBlocks*BlockSize) and allocates nothing.
func (c *Manager) Stats() Stats {
	st := Stats{BlockSize: int(c.bs), Total: len(c.ref), Cached: c.evq.len(), Free: len(c.free)}
	clear(c.fill)
	for s := range c.seqs {
		sq := &c.seqs[s]
		for i, b := range sq.table {
			c.fill[b] = max(c.fill[b], min(c.bs, sq.n-int32(i)*c.bs))
		}
	}
	for b, r := range c.ref {
		if r > 0 {
			st.Used++
		}
		if r > 1 {
			st.Shared++
		}
		base := int32(b) * c.bs
		for j := range c.fill[b] {
			if c.cells.pos(base+j) >= 0 {
				st.UsedCells++
			}
		}
	}
	return st
}

// SeqCells is SeqLen.
func (c *Manager) SeqCells(seq int) int { return c.SeqLen(seq) }

// Clear empties every sequence and forgets the prefix cache: all blocks become free, and the
// pending store operations are dropped (nothing they would write is referenced any more).
func (c *Manager) Clear() {
	c.gen++
	c.ops.reset()
	c.tier.spills, c.tier.spillToks = c.tier.spills[:0], c.tier.spillToks[:0]
	for s := range c.seqs {
		c.seqs[s] = seqTable{table: c.seqs[s].table[:0], posMin: -1, posMax: -1, intent: c.seqs[s].intent[:0]}
	}
	c.forgetAll()
	c.cells.emptyRange(0, int32(c.cells.n()))
}

// copyCells copies the first count cells of block src (position, token; K and V of every layer
// through a store operation) into block dst, fresh from alloc; dst is stale if src is.
func (c *Manager) copyCells(src, dst, count int32) {
	s, d := src*c.bs, dst*c.bs
	c.cells.copyRange(s, d, count)
	if c.stale[src] {
		c.markStale(dst) // dst is fresh from alloc: not stale until now
	}
	c.ops.copyCells(s, d, count)
}

// TakeOps appends the pending store operations, in the order they were decided, to dst and
// returns it; they are then no longer pending. Schedule does this for a step; a caller that
// changes sequences without decoding (a test, a tool) hands them to its store itself.
func (c *Manager) TakeOps(dst []batch.KVOp) []batch.KVOp {
	return c.ops.take(dst)
}

// PendingOps returns the number of pending store operations.
func (c *Manager) PendingOps() int { return c.ops.len() }

// cowBlock makes seq's table slot bi hold a block seq may modify: if the block is shared, its
// first count cells are copied to a new block that replaces it in seq's table. The caller has
// checked availability. It returns the block now at slot bi.
func (c *Manager) cowBlock(seq int, bi int, count int32) int32 {
	b := c.seqs[seq].table[bi]
	if c.ref[b] <= 1 {
		return b
	}
	nb := c.alloc()
	c.copyCells(b, nb, count)
	c.split(b, nb, 1)
	c.seqs[seq].table[bi] = nb
	return nb
}

// trim drops seq's trailing empty slots and the blocks no longer covered, then recomputes its
// position range.
func (c *Manager) trim(seq int) {
	sq := &c.seqs[seq]
	n := sq.n
	for n > 0 && c.cells.pos(sq.table[(n-1)/c.bs]*c.bs+(n-1)%c.bs) < 0 {
		n--
	}
	c.truncate(sq, n)
	c.updateRange(seq)
}

// truncate cuts sq to its first n cells, releasing the blocks past the one holding the last.
func (c *Manager) truncate(sq *seqTable, n int32) {
	keep := int((n + c.bs - 1) / c.bs)
	for i := len(sq.table) - 1; i >= keep; i-- {
		c.release(sq.table[i])
	}
	sq.table = sq.table[:keep]
	sq.n = n
}

// updateRange recomputes seq's position range from its cells.
func (c *Manager) updateRange(seq int) {
	sq := &c.seqs[seq]
	sq.posMin, sq.posMax = -1, -1
	for i := range sq.n {
		p := c.cells.pos(sq.table[i/c.bs]*c.bs + i%c.bs)
		if p < 0 {
			continue
		}
		if sq.posMin < 0 || p < sq.posMin {
			sq.posMin = p
		}
		sq.posMax = max(sq.posMax, p)
	}
}

// cellOf returns the cell index of seq's slot i (i < nCells).
func (c *Manager) cellOf(seq int, i int32) int32 {
	return c.seqs[seq].table[i/c.bs]*c.bs + i%c.bs
}
