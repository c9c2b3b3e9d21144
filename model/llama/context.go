package llama

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
	KVType    kvcache.DType // F16 (llama.cpp's default) or F32
	BlockSize int           // KV block size in cells; 0 = 16
	Threads   int           // worker goroutines; 0 = all cores
}

func (o *Options) defaults(m *Model) {
	if o.NCtx <= 0 {
		o.NCtx = min(m.CtxTrain, 4096)
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
}

// Context runs forward passes of one Model over its own paged KV cache. It is not safe for
// concurrent use: one goroutine (the engine's step loop, or a CLI) owns it.
type Context struct {
	m    *Model
	opts Options
	pool *ops.Pool
	kv   *kvcache.Cache
	rope *ops.Rope

	// Scratch for one micro-batch of up to NUBatch tokens, row-major [token][...].
	x, xn, q, k, v, att, tmp, gate, up []float32
	xq                                 [2][]byte // quantized activations; two slots for differing act types
	ropeCS                             []float32 // [token][rope.TableLen()]
	cells                              []int32   // KV cell of each token
	workerScores                       [][]float32
	vis                                []int32   // visible KV cells of every token, flat
	visOff                             []int32   // token t's cells are vis[visOff[t]:visOff[t+1]]
	kvRow                              []float32 // F16 cache conversions

	logits  []float32 // [nOut][Vocab] from the last Decode
	outRows []int32   // batch index -> logits row, -1 when not wanted
	nOut    int
	ubs     []batch.UBatch

	mm   matmulTask
	qa   quantTask
	attn attnTask
	sw   swigluTask
}

// NewContext allocates a Context: the KV cache for opts.NCtx cells and scratch for NUBatch tokens.
func NewContext(m *Model, opts Options) (*Context, error) {
	opts.defaults(m)
	if opts.NCtx%opts.BlockSize != 0 {
		opts.NCtx += opts.BlockSize - opts.NCtx%opts.BlockSize
	}
	c := &Context{m: m, opts: opts, rope: ops.NewRope(m.RopeDims, m.RopeBase, m.RopeFreqScale)}
	kv, err := kvcache.New(kvcache.Config{
		NLayers: m.NLayers, KVDim: m.KVDim(), BlockSize: opts.BlockSize,
		NumBlocks: opts.NCtx / opts.BlockSize, DType: opts.KVType, MaxSeqs: opts.NSeqMax,
		ShiftK: c.shiftK,
	})
	if err != nil {
		return nil, err
	}
	c.kv = kv
	c.pool = ops.NewPool(opts.Threads)
	n := opts.NUBatch
	f := func(width int) []float32 { return make([]float32, n*width) }
	c.x, c.xn, c.q, c.att, c.tmp = f(m.Dim), f(m.Dim), f(m.Dim), f(m.Dim), f(m.Dim)
	c.k, c.v = f(m.KVDim()), f(m.KVDim())
	c.gate, c.up = f(m.FFN), f(m.FFN)
	c.ropeCS = f(c.rope.TableLen())
	c.cells = make([]int32, n)
	c.visOff = make([]int32, n+1)
	c.kvRow = make([]float32, m.KVDim())
	maxAct := 0
	for _, w := range m.allWeights() {
		maxAct = max(maxAct, quant.ActType(w.Type).RowSize(w.Cols))
	}
	for i := range c.xq {
		c.xq[i] = make([]byte, n*maxAct)
	}
	rep := m.NHeads / m.NKVHeads
	for range c.pool.Size() {
		c.workerScores = append(c.workerScores, make([]float32, rep*opts.NCtx))
	}
	return c, nil
}

func (m *Model) allWeights() []*Weight {
	ws := []*Weight{&m.Output}
	for i := range m.Layers {
		l := &m.Layers[i]
		ws = append(ws, &l.Wq, &l.Wk, &l.Wv, &l.Wo, &l.Gate, &l.Up, &l.Down)
	}
	return ws
}

// Model returns the model this context runs.
func (c *Context) Model() *Model { return c.m }

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
	if err := b.Validate(c.m.Vocab, c.opts.NSeqMax); err != nil {
		return err
	}
	if err := c.kv.CheckReserve(b.Pos, b.Seqs); err != nil {
		return err
	}
	c.outRows, c.nOut = b.OutputRows(c.outRows)
	if need := c.nOut * c.m.Vocab; cap(c.logits) < need {
		c.logits = make([]float32, need)
	}
	c.logits = c.logits[:c.nOut*c.m.Vocab]
	c.ubs = b.Split(c.opts.NUBatch, c.ubs)
	for i := range c.ubs {
		ub := &c.ubs[i]
		if err := c.kv.Reserve(ub.Tokens, ub.Pos, ub.Seqs, c.cells[:len(ub.Tokens)]); err != nil {
			return err
		}
		c.forward(ub)
	}
	return nil
}

// Logits returns the logits (len Vocab) computed for token i of the last decoded batch, or nil if
// that token did not ask for them. The slice is overwritten by the next Decode.
func (c *Context) Logits(i int) []float32 {
	if i < 0 || i >= len(c.outRows) || c.outRows[i] < 0 {
		return nil
	}
	r := int(c.outRows[i])
	return c.logits[r*c.m.Vocab : (r+1)*c.m.Vocab]
}

// shiftK re-rotates one cached key row (all kv heads) by delta positions: RoPE rotations compose,
// so rotating by the difference moves a key to its new position.
func (c *Context) shiftK(k []float32, delta int32) {
	cs := make([]float32, c.rope.TableLen())
	c.rope.Table(cs, float64(delta))
	c.rope.Apply(k, c.m.HeadDim, cs)
}
