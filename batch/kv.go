package batch

// KV is a step's KV-cache schedule, llama.cpp's and vLLM's slot mapping: what the owner of the
// KV bookkeeping (kvcache.Manager, through the engine or a runner.Session) decided for this
// batch, handed to the owner of the K/V memory (the runner's kvstore.Store) with it. The
// manager fills it in Schedule, reusing the slices' capacity; the views (Tables, CellPos) are
// the manager's memory, read-only and valid until its next mutating call.
type KV struct {
	// Slots[i] is the cell of batch token i, where the forward pass writes its K and V rows
	// (len(Slots) == Len()). Cell c is block c/BlockSize at offset c%BlockSize.
	Slots []int32
	// Ops are the store operations due before this step's forward passes, in order: copies of
	// cells (copy-on-write of a shared block, the cells a partial prefix match takes, the moves
	// of a context shift) and re-rotations of keys. Apply all of them, first, even when the
	// batch then fails: the bookkeeping already counts them done.
	Ops []KVOp
	// Tables[s] is sequence s's block table after this step's tokens were added (indexed by
	// sequence id, len MaxSeqs) and Lens[s] its length in cells: its cells are the first
	// Lens[s] slots of Tables[s], slot j being cell Tables[s][j/BlockSize]*BlockSize +
	// j%BlockSize.
	Tables [][]int32
	Lens   []int32
	// CellPos[c] is the position held by cell c, -1 for an empty cell (len NumBlocks*BlockSize).
	// Cells of this step's tokens already hold their positions: attention filters by position.
	CellPos   []int32
	BlockSize int32
	// Images are the byte buffers of the KVLoad and KVSave operations (an op's Src or Dst
	// indexes it): a run of cells' K and V rows in the store's own type, laid out as
	// kvfile.Block.Data ([layer][K then V][cell][row bytes]). The owner of the bookkeeping's
	// tiers (the engine) fills them; nil when no op needs one.
	Images [][]byte
}

// KVOpKind says what a KVOp does.
type KVOpKind uint8

const (
	// KVCopy copies cells [Src, Src+N) to cells [Dst, Dst+N): K and V rows of every layer. The
	// ranges may overlap only with Dst < Src (a compaction moving cells down), read as memmove.
	KVCopy KVOpKind = iota + 1
	// KVShift re-rotates the keys of cells [Dst, Dst+N) of every layer by Delta positions
	// (each layer's rope): the cells' positions moved by Delta.
	KVShift
	// KVLoad writes cells [Dst, Dst+N) of every layer from Images[Src] (blocks read back from
	// another tier: disk, a peer, a saved slot).
	KVLoad
	// KVSave reads cells [Src, Src+N) of every layer into Images[Dst] (a block leaving RAM for
	// another tier), before any later operation or forward pass overwrites them.
	KVSave
)

// KVOp is one store operation of KV.Ops.
type KVOp struct {
	Kind        KVOpKind
	Src, Dst, N int32
	Delta       int32 // KVShift only
}
