package runner

import (
	"errors"
	"fmt"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/kvformat"
	"ubatch/kvstore"
	"ubatch/ops"
	"ubatch/quant"
)

// Options sizes a Runtime.
type Options struct {
	NCtx      int        // KV cells shared by all sequences (llama.cpp's -c); also the longest sequence
	NBatch    int        // most tokens one Decode call accepts (logical batch)
	NUBatch   int        // most tokens one forward pass computes (micro-batch)
	NSeqMax   int        // sequence ids are in [0, NSeqMax)
	KVType    quant.Type // a KV format (kvformat): F16 (llama.cpp's default), F32 or Q8_0 (HeadDim a multiple of 32)
	BlockSize int        // KV block size in cells; 0 = kvcache.DefaultBlockSize
	Threads   int        // worker goroutines; 0 = all cores
	// TiledAttention attends every token by tiles (flash-style: several query rows share each
	// K/V tile, no score row over the history), on the paths whose tiled kernel has assembly
	// (AVX-512); decode blocks of few rows take its row kernel (ops.AttnTiled). It halves the
	// cost of a prompt deep in the context and saves ~10% at its start; the commands turn it on
	// by default (--tiled-attention), the zero Options keep the exact kernels. Every token or
	// none: a token's attention must not depend on the batch it came in.
	TiledAttention bool
	// Embeddings makes the tokens that ask for output keep their final-norm hidden state (read
	// with Embedding) instead of logits: a context for /v1/embeddings skips the output matmul.
	Embeddings bool
	// OnBlock receives the prefix-cache events (kvcache.Config.OnBlock) of the KV manager made
	// for this context (KVConfig: by the engine, or a Session); nil = none.
	OnBlock func(kvcache.BlockEvent)
}

// The sizes of a Runtime whose Options leave them 0 (llama.cpp's): the logical and the
// physical batch.
const (
	DefaultNBatch  = 2048
	DefaultNUBatch = 512
)

func (o *Options) defaults(h *Hparams) {
	if o.NCtx <= 0 {
		o.NCtx = min(h.CtxTrain, 4096)
	}
	if o.NBatch <= 0 {
		o.NBatch = DefaultNBatch
	}
	if o.NUBatch <= 0 {
		o.NUBatch = DefaultNUBatch
	}
	o.NUBatch = min(o.NUBatch, o.NBatch)
	if o.NSeqMax <= 0 {
		o.NSeqMax = 1
	}
	if o.BlockSize <= 0 {
		o.BlockSize = kvcache.DefaultBlockSize
	}
	if o.NCtx%o.BlockSize != 0 {
		o.NCtx += o.BlockSize - o.NCtx%o.BlockSize
	}
}

// Scratch holds one micro-batch's activations, row-major [token][width], for up to NUBatch
// tokens. Families compute in these buffers; the runner's operations take slices of them.
type Scratch struct {
	X    []float32 // residual stream [n][Dim]
	XN   []float32 // normed input of a sub-layer [n][Dim]
	Q    []float32 // queries [n][QDim]
	K, V []float32 // keys and values [n][KVDim]
	Att  []float32 // attention output [n][QDim]
	Tmp  []float32 // sub-layer output [n][max(Dim, QDim)]
	Gate []float32 // feed-forward [n][FFN]
	Up   []float32 // feed-forward [n][FFN]
	Wide []float32 // output of a fused matrix [n][max(QDim+2·KVDim, 2·FFN)]
	// A family's own values (Hparams.AuxWidth; nil when 0): [n][AuxWidth] and one row of it.
	Aux, AuxRow []float32
}

// Runtime runs forward passes of one Graph: it owns the K/V memory (a kvstore.Store), the
// scratch buffers, the worker pool and the logits. It does not own the KV bookkeeping: a batch
// comes with its schedule (batch.Batch.KV: the cell of every token, the block tables, the store
// operations due) from the KV manager's owner, the engine, which makes its kvcache.Manager from
// KVConfig; callers without an engine (tools, tests) pair it with a manager of their own in a
// Session. One manager schedules a Runtime's batches. It is not safe for concurrent use: one
// goroutine (the engine's step loop, or a CLI) owns it.
type Runtime struct {
	g     Graph
	h     *Hparams
	opts  Options
	pool  *ops.Pool
	store *kvstore.Store
	kvCfg kvcache.Config
	S     Scratch

	n     int // tokens of the micro-batch being computed
	ub    *batch.UBatch
	kv    *batch.KV // the schedule of the batch being decoded
	cells []int32   // KV cell of each token of ub (ub.Slots)
	xq    [2][]byte
	// mmSums holds each matmul job's activation sums (quant.PanelSums), computed once per job
	// instead of once per row range.
	mmSums [3][]int32
	ropes  ropeTables
	vis    [2]visList // visible KV cells of every token: full history, and one sliding window
	nVis   int
	// The micro-batch's attention blocks (planBlocks, once per micro-batch when planned is
	// false), which tokens are in tiled ones, and the tiled blocks' cells per window.
	planned     bool
	blocks      []tokBlock
	nTiled      int
	tokTiled    []bool
	tileLists   [2]tileList
	nTileLists  int
	tileWorkers [][]tileWorker // per tile shape (tileShapes), per pool worker
	tileShapes  []tileShape
	tiledGo     bool // tests: TiledAttention on the kernel's Go twin where it has no assembly
	// shift is shiftK's rotation table for (layer, delta), valid when ok.
	shift struct {
		cs    []float32
		layer int
		delta int32
		ok    bool
	}

	workerScores [][]float32
	logits       []float32 // [nOut][Vocab] from the last Decode
	outRows      []int32   // batch index -> logits row, -1 when not wanted
	nOut         int
	hidden       []float32 // [nHid][Dim]: final-norm hidden states of the tokens that asked for them
	hidRows      []int32   // batch index -> hidden row, -1 when not wanted
	nHid         int
	ubs          []batch.UBatch

	mm   matmulTask
	gemm *GEMMStats // nil unless CountGEMM asked for them
	qa   quantTask
	attn attnTask
	act  actTask
	moe  moeScratch // sized when Hparams.NExperts > 0
	rec  *recState  // every sequence's recurrent state, when Hparams.Recurrent is set
}

// New allocates a Runtime for g: the K/V memory for opts.NCtx cells and scratch for
// NUBatch tokens.
func New(g Graph, opts Options) (*Runtime, error) {
	h := g.Hparams()
	opts.defaults(h)
	c := &Runtime{g: g, h: h, opts: opts}
	if err := c.kvConfig(); err != nil {
		return nil, err
	}
	st, err := kvstore.New(c.kvCfg, c.shiftK)
	if err != nil {
		return nil, err
	}
	c.store = st
	c.pool = ops.NewPool(opts.Threads)
	n := opts.NUBatch
	f := func(width int) []float32 { return make([]float32, n*width) }
	maxAct := 0
	for _, w := range g.Matrices() {
		maxAct = max(maxAct, quant.ActType(w.Type).RowSize(w.Cols))
	}
	_, qd, kvd, rep := h.MaxShape()
	wide := max(qd+2*kvd, 2*h.FFN) // fused QKV, fused gate+up
	c.S = Scratch{
		X: f(h.Dim), XN: f(max(h.Dim, qd)), Q: f(qd), K: f(kvd), V: f(kvd), Att: f(qd),
		Tmp: f(max(h.Dim, qd)), Gate: f(h.FFN), Up: f(h.FFN), Wide: f(wide),
	}
	if h.AuxWidth > 0 {
		c.S.Aux, c.S.AuxRow = f(h.AuxWidth), make([]float32, h.AuxWidth)
	}
	for i := range c.vis {
		c.vis[i].off = make([]int32, n+1)
	}
	for i := range c.xq {
		c.xq[i] = make([]byte, n*maxAct)
	}
	maxSums := 0
	for _, w := range g.Matrices() {
		if w.packed {
			maxSums = max(maxSums, quant.SumsLen(w.Type, w.Cols, n))
		}
	}
	for i := range c.mmSums {
		c.mmSums[i] = make([]int32, maxSums)
	}
	for range c.pool.Size() {
		c.workerScores = append(c.workerScores, make([]float32, rep*opts.NCtx))
	}
	c.newTileWorkers()
	c.tokTiled = make([]bool, n)
	if h.NExperts > 0 {
		c.moe = newMoEScratch(h, n)
	}
	if h.Recurrent != nil {
		c.rec = newRecState(h.Recurrent, opts.NSeqMax, n, qd)
	}
	return c, nil
}

// kvConfig sets c.kvCfg, the KV layout of c's graph: a row per KV layer of its shape's KVDim
// (KVDims when the layers differ), every head starting a block of the KV format.
func (c *Runtime) kvConfig() error {
	h, opts := c.h, &c.opts
	n := h.NKVLayers()
	if h.KVShapes != nil && len(h.KVShapes) != n {
		return fmt.Errorf("runner: %d KV layer shapes for %d KV layers", len(h.KVShapes), n)
	}
	for l := range n {
		a := h.Shape(l)
		if a.NHeads <= 0 || a.NKVHeads <= 0 || a.HeadDim <= 0 || a.NHeads%a.NKVHeads != 0 {
			return fmt.Errorf("runner: KV layer %d: %d query heads over %d KV heads of %d", l, a.NHeads, a.NKVHeads, a.HeadDim)
		}
		if f := kvformat.Of(opts.KVType); f != nil && a.HeadDim%f.Align() != 0 {
			// A head's values must start a row's block (kvformat's Align).
			return fmt.Errorf("runner: a %v KV cache needs a head dimension that is a multiple of %d, this model's is %d: use an F16 KV cache (--kv-type f16)", opts.KVType, f.Align(), a.HeadDim)
		}
	}
	_, _, kvd, _ := h.MaxShape()
	c.kvCfg = kvcache.Config{
		NLayers: n, KVDim: kvd, BlockSize: opts.BlockSize,
		NumBlocks: opts.NCtx / opts.BlockSize, DType: opts.KVType, MaxSeqs: opts.NSeqMax,
		OnBlock: opts.OnBlock,
	}
	if h.KVShapes != nil {
		c.kvCfg.KVDims = make([]int, n)
		for l := range n {
			c.kvCfg.KVDims[l] = h.Shape(l).KVDim()
		}
	}
	_, err := c.kvCfg.Check()
	return err
}

// Graph returns the graph this context runs.
func (c *Runtime) Graph() Graph { return c.g }

// Hparams returns the graph's hyper-parameters.
func (c *Runtime) Hparams() *Hparams { return c.h }

// Options returns the effective options (defaults filled in).
func (c *Runtime) Options() Options { return c.opts }

// KVConfig is the configuration of the KV manager that schedules this context's batches: the
// layout of its store (blocks, block size, element type, sequences) and Options.OnBlock.
func (c *Runtime) KVConfig() kvcache.Config { return c.kvCfg }

// Store returns the context's K/V memory.
func (c *Runtime) Store() *kvstore.Store { return c.store }

// Close stops the worker goroutines.
func (c *Runtime) Close() { c.pool.Close() }

// ErrBatchTooLarge reports a batch over Options.NBatch tokens.
var ErrBatchTooLarge = errors.New("batch larger than n_batch")

// ErrUnscheduled reports a batch without a KV schedule given to Runtime.Decode.
var ErrUnscheduled = errors.New("runner: a batch without a KV schedule (batch.Batch.KV): schedule it with a kvcache.Manager first, or decode it through a Session")

// Decode runs the forward pass for every token of b (split into micro-batches of NUBatch), writes
// their K/V into the store and keeps the logits of the tokens that asked for them (read them
// with Logits). b.KV is its schedule (kvcache.Manager.Schedule, by the engine or a Session):
// Decode first applies b.KV.Ops to the store, then checks b (a failure then changes nothing but
// those operations, which the manager counts as done), then writes every token's K and V at
// b.KV.Slots and attends through b.KV's tables. It reserves nothing. A batch without a schedule
// is ErrUnscheduled.
func (c *Runtime) Decode(b *batch.Batch) error {
	kv := b.KV
	if kv == nil {
		return ErrUnscheduled
	}
	if err := c.store.ApplyImages(kv.Ops, kv.Images); err != nil {
		return err
	}
	if b.Len() > c.opts.NBatch {
		return c.decodeTooLarge(b)
	}
	if err := b.Validate(c.h.Vocab, c.opts.NSeqMax); err != nil {
		return err
	}
	if err := c.checkRecurrent(b); err != nil {
		return err
	}
	if len(kv.Slots) != b.Len() || len(kv.Tables) != c.opts.NSeqMax || len(kv.Lens) != c.opts.NSeqMax ||
		len(kv.CellPos) != c.opts.NCtx || int(kv.BlockSize) != c.opts.BlockSize {
		return fmt.Errorf("runner: the batch's KV schedule (%d slots, %d tables, %d cells, blocks of %d) does not fit %d tokens, %d sequences, %d cells in blocks of %d",
			len(kv.Slots), len(kv.Tables), len(kv.CellPos), kv.BlockSize, b.Len(), c.opts.NSeqMax, c.opts.NCtx, c.opts.BlockSize)
	}
	for _, cell := range kv.Slots {
		if cell < 0 || int(cell) >= c.opts.NCtx {
			return fmt.Errorf("runner: KV cell %d outside [0, %d)", cell, c.opts.NCtx)
		}
	}
	c.outputRows(b)
	c.ubs = b.Split(c.opts.NUBatch, c.ubs)
	c.kv = kv
	defer func() { c.ub, c.kv = nil, nil }()
	for i := range c.ubs {
		ub := &c.ubs[i]
		c.ub, c.n, c.cells = ub, len(ub.Tokens), ub.Slots
		c.ropes.reset()
		c.nVis, c.nTileLists, c.planned = 0, 0, false
		c.g.Forward(c, ub)
	}
	return nil
}

func (c *Runtime) decodeTooLarge(b *batch.Batch) error {
	return fmt.Errorf("%w: %d tokens, n_batch is %d", ErrBatchTooLarge, b.Len(), c.opts.NBatch)
}

// outputRows maps b's output tokens to rows: a logits row each, in token order, or, for those
// marked Hidden (every output token in an Embeddings context), a hidden-state row; and sizes
// both buffers.
func (c *Runtime) outputRows(b *batch.Batch) {
	c.outRows, c.hidRows = c.outRows[:0], c.hidRows[:0]
	c.nOut, c.nHid = 0, 0
	for i := range b.Tokens {
		switch {
		case i >= len(b.Logits) || !b.Logits[i]:
			c.outRows, c.hidRows = append(c.outRows, -1), append(c.hidRows, -1)
		case c.opts.Embeddings || (i < len(b.Hidden) && b.Hidden[i]):
			c.outRows, c.hidRows = append(c.outRows, -1), append(c.hidRows, int32(c.nHid))
			c.nHid++
		default:
			c.outRows, c.hidRows = append(c.outRows, int32(c.nOut)), append(c.hidRows, -1)
			c.nOut++
		}
	}
	if need := c.nOut * c.h.Vocab; cap(c.logits) < need {
		c.logits = make([]float32, need)
	}
	c.logits = c.logits[:c.nOut*c.h.Vocab]
	if need := c.nHid * c.h.Dim; cap(c.hidden) < need {
		c.hidden = make([]float32, need)
	}
	c.hidden = c.hidden[:c.nHid*c.h.Dim]
}

// Logits returns the logits (len Vocab) computed for token i of the last decoded batch, or nil if
// that token did not ask for them or asked for its hidden state (batch.Batch.Hidden, or any
// token of an Embeddings context). The slice is overwritten by the next Decode.
func (c *Runtime) Logits(i int) []float32 { return row(c.logits, c.outRows, i, c.h.Vocab) }

// Embedding returns the final-norm hidden state (len Dim) of token i of the last decoded batch,
// or nil if it did not ask for it: an output token of a context made with Options.Embeddings,
// or one marked in batch.Batch.Hidden in any context. The slice is overwritten by the next
// Decode.
func (c *Runtime) Embedding(i int) []float32 { return row(c.hidden, c.hidRows, i, c.h.Dim) }

func row(buf []float32, rows []int32, i, w int) []float32 {
	if i < 0 || i >= len(rows) || rows[i] < 0 {
		return nil
	}
	r := int(rows[i])
	return buf[r*w : (r+1)*w]
}

// shiftK re-rotates one cached key row (all kv heads) of layer l by delta positions: RoPE
// rotations compose, so rotating by the difference moves a key to its new position. The
// rotation table is kept for the last (layer, delta): the store applies a run of shifts by one
// delta layer by layer (kvstore.Store.Apply of kvcache.SeqDiscard's operations), so a context
// shift computes one table per layer and allocates nothing once the table has grown.
func (c *Runtime) shiftK(l int, k []float32, delta int32) {
	r := c.g.LayerRope(l)
	if !c.shift.ok || c.shift.layer != l || c.shift.delta != delta {
		if n := r.TableLen(); cap(c.shift.cs) < n {
			c.shift.cs = make([]float32, n)
		}
		c.shift.cs = c.shift.cs[:r.TableLen()]
		r.ShiftTable(c.shift.cs, float64(delta))
		c.shift.layer, c.shift.delta, c.shift.ok = l, delta, true
	}
	r.Apply(k, c.h.Shape(l).HeadDim, c.shift.cs)
}
