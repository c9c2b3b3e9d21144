package runner

import (
	"errors"
	"fmt"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/ops"
	"ubatch/quant"
)

// Options sizes a Context.
type Options struct {
	NCtx      int           // KV cells shared by all sequences (llama.cpp's -c); also the longest sequence
	NBatch    int           // most tokens one Decode call accepts (logical batch)
	NUBatch   int           // most tokens one forward pass computes (micro-batch)
	NSeqMax   int           // sequence ids are in [0, NSeqMax)
	KVType    kvcache.DType // F16 (llama.cpp's default), F32 or Q8_0 (HeadDim a multiple of 32)
	BlockSize int           // KV block size in cells; 0 = 16
	Threads   int           // worker goroutines; 0 = all cores
	// Embeddings makes the tokens that ask for output keep their final-norm hidden state (read
	// with Embedding) instead of logits: a context for /v1/embeddings skips the output matmul.
	Embeddings bool
	// OnBlock receives the KV cache's prefix-cache events (kvcache.Config.OnBlock); nil = none.
	OnBlock func(kvcache.BlockEvent)
}

func (o *Options) defaults(h *Hparams) {
	if o.NCtx <= 0 {
		o.NCtx = min(h.CtxTrain, 4096)
	}
	if o.NBatch <= 0 {
		o.NBatch = 2048
	}
	if o.NUBatch <= 0 {
		o.NUBatch = 512
	}
	o.NUBatch = min(o.NUBatch, o.NBatch)
	if o.NSeqMax <= 0 {
		o.NSeqMax = 1
	}
	if o.BlockSize <= 0 {
		o.BlockSize = 16
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
}

// Context runs forward passes of one Graph over its own paged KV cache: it is the only owner of
// that cache. It is not safe for concurrent use: one goroutine (the engine's step loop, or a CLI)
// owns it.
type Context struct {
	g    Graph
	h    *Hparams
	opts Options
	pool *ops.Pool
	kv   *kvcache.Cache
	S    Scratch

	n     int // tokens of the micro-batch being computed
	ub    *batch.UBatch
	cells []int32 // KV cell of each token of ub
	xq    [2][]byte
	// mmSums holds each matmul job's activation sums (quant.PanelSums), computed once per job
	// instead of once per row range.
	mmSums [3][]int32
	ropes  ropeTables
	vis    [2]visList // visible KV cells of every token: full history, and one sliding window
	nVis   int
	kvRow  []float32 // F16 cache conversions
	// shift is shiftK's rotation table for (layer, delta), valid when ok.
	shift struct {
		cs    []float32
		layer int
		delta int32
		ok    bool
	}

	workerScores [][]float32
	logits       []float32 // [nOut][width] from the last Decode; width is Vocab, or Dim for Embeddings
	outRows      []int32   // batch index -> logits row, -1 when not wanted
	nOut         int
	ubs          []batch.UBatch

	mm   matmulTask
	qa   quantTask
	attn attnTask
	act  actTask
}

// NewContext allocates a Context for g: the KV cache for opts.NCtx cells and scratch for NUBatch
// tokens.
func NewContext(g Graph, opts Options) (*Context, error) {
	h := g.Hparams()
	opts.defaults(h)
	c := &Context{g: g, h: h, opts: opts}
	if opts.KVType == kvcache.Q8_0 && h.HeadDim%32 != 0 {
		// As in llama.cpp: a Q8_0 block of 32 must not mix heads (one head's large keys would
		// coarsen another's).
		return nil, fmt.Errorf("runner: a Q8_0 KV cache needs a head dimension that is a multiple of 32, this model's is %d: use an F16 KV cache (--kv-type f16)", h.HeadDim)
	}
	kv, err := kvcache.New(kvcache.Config{
		NLayers: h.NLayers, KVDim: h.KVDim(), BlockSize: opts.BlockSize,
		NumBlocks: opts.NCtx / opts.BlockSize, DType: opts.KVType, MaxSeqs: opts.NSeqMax,
		ShiftK: c.shiftK, OnBlock: opts.OnBlock,
	})
	if err != nil {
		return nil, err
	}
	c.kv = kv
	c.pool = ops.NewPool(opts.Threads)
	n := opts.NUBatch
	f := func(width int) []float32 { return make([]float32, n*width) }
	maxAct := 0
	for _, w := range g.Matrices() {
		maxAct = max(maxAct, quant.ActType(w.Type).RowSize(w.Cols))
	}
	qd, kvd := h.QDim(), h.KVDim()
	wide := max(qd+2*kvd, 2*h.FFN) // fused QKV, fused gate+up
	c.S = Scratch{
		X: f(h.Dim), XN: f(max(h.Dim, qd)), Q: f(qd), K: f(kvd), V: f(kvd), Att: f(qd),
		Tmp: f(max(h.Dim, qd)), Gate: f(h.FFN), Up: f(h.FFN), Wide: f(wide),
	}
	c.cells = make([]int32, n)
	for i := range c.vis {
		c.vis[i].off = make([]int32, n+1)
	}
	c.kvRow = make([]float32, kvd)
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
	rep := h.NHeads / h.NKVHeads
	for range c.pool.Size() {
		c.workerScores = append(c.workerScores, make([]float32, rep*opts.NCtx))
	}
	return c, nil
}

// Graph returns the graph this context runs.
func (c *Context) Graph() Graph { return c.g }

// Hparams returns the graph's hyper-parameters.
func (c *Context) Hparams() *Hparams { return c.h }

// Options returns the effective options (defaults filled in).
func (c *Context) Options() Options { return c.opts }

// KV returns the context's KV cache, for sequence operations and statistics.
func (c *Context) KV() *kvcache.Cache { return c.kv }

// Close stops the worker goroutines.
func (c *Context) Close() { c.pool.Close() }

// ErrBatchTooLarge reports a batch over Options.NBatch tokens.
var ErrBatchTooLarge = errors.New("batch larger than n_batch")

// Decode runs the forward pass for every token of b (split into micro-batches of NUBatch), writes
// their K/V into the cache and keeps the logits of the tokens that asked for them (read them with
// Logits). It fails before computing anything when the batch is invalid or the KV cache cannot
// hold it (kvcache.ErrKVFull: free sequences or preempt, then retry).
func (c *Context) Decode(b *batch.Batch) error {
	if b.Len() > c.opts.NBatch {
		return fmt.Errorf("%w: %d tokens, n_batch is %d", ErrBatchTooLarge, b.Len(), c.opts.NBatch)
	}
	if err := b.Validate(c.h.Vocab, c.opts.NSeqMax); err != nil {
		return err
	}
	if err := c.kv.CheckReserve(b.Pos, b.Seqs); err != nil {
		return err
	}
	c.outRows, c.nOut = b.OutputRows(c.outRows)
	if need := c.nOut * c.outWidth(); cap(c.logits) < need {
		c.logits = make([]float32, need)
	}
	c.logits = c.logits[:c.nOut*c.outWidth()]
	c.ubs = b.Split(c.opts.NUBatch, c.ubs)
	// A forward pass that panics leaves its micro-batch's cells without K/V: they must never be
	// handed to another sequence (hashed, kept as a partial block, copied by a partial match).
	defer func() {
		if c.ub != nil {
			c.kv.ForgetCells(c.cells[:c.n])
			c.ub = nil
		}
	}()
	for i := range c.ubs {
		ub := &c.ubs[i]
		if err := c.kv.Reserve(ub.Tokens, ub.Pos, ub.Seqs, c.cells[:len(ub.Tokens)]); err != nil {
			return err
		}
		c.ub, c.n = ub, len(ub.Tokens)
		c.ropes.reset()
		c.nVis = 0
		c.g.Forward(c, ub)
	}
	c.ub = nil
	return nil
}

// Logits returns the logits (len Vocab) computed for token i of the last decoded batch, or nil if
// that token did not ask for them or the context computes embeddings. The slice is overwritten by
// the next Decode.
func (c *Context) Logits(i int) []float32 {
	if c.opts.Embeddings {
		return nil
	}
	return c.outRow(i)
}

// Embedding returns the final-norm hidden state (len Dim) of token i of the last decoded batch
// in a context made with Options.Embeddings, or nil. The slice is overwritten by the next Decode.
func (c *Context) Embedding(i int) []float32 {
	if !c.opts.Embeddings {
		return nil
	}
	return c.outRow(i)
}

func (c *Context) outWidth() int {
	if c.opts.Embeddings {
		return c.h.Dim
	}
	return c.h.Vocab
}

func (c *Context) outRow(i int) []float32 {
	if i < 0 || i >= len(c.outRows) || c.outRows[i] < 0 {
		return nil
	}
	r, w := int(c.outRows[i]), c.outWidth()
	return c.logits[r*w : (r+1)*w]
}

// shiftK re-rotates one cached key row (all kv heads) of layer l by delta positions: RoPE
// rotations compose, so rotating by the difference moves a key to its new position. The
// rotation table is kept for the last (layer, delta): the cache shifts layer by layer, every
// cell by the same delta (kvcache.SeqDiscard), so a context shift computes one table per layer
// and allocates nothing once the table has grown.
func (c *Context) shiftK(l int, k []float32, delta int32) {
	r := c.g.LayerRope(l)
	if !c.shift.ok || c.shift.layer != l || c.shift.delta != delta {
		if n := r.TableLen(); cap(c.shift.cs) < n {
			c.shift.cs = make([]float32, n)
		}
		c.shift.cs = c.shift.cs[:r.TableLen()]
		r.ShiftTable(c.shift.cs, float64(delta))
		c.shift.layer, c.shift.delta, c.shift.ok = l, delta, true
	}
	r.Apply(k, c.h.HeadDim, c.shift.cs)
}
