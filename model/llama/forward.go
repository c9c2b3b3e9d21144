package llama

import (
	"math"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/ops"
	"ubatch/quant"
)

// forward computes one micro-batch whose KV cells are already reserved in c.cells.
func (c *Context) forward(ub *batch.UBatch) {
	m := c.m
	n := len(ub.Tokens)
	dim, kvDim := m.Dim, m.KVDim()
	tl := c.rope.TableLen()
	for i, tok := range ub.Tokens {
		row := m.Embd.Data[int(tok)*m.Embd.RowBytes():][:m.Embd.RowBytes()]
		if err := quant.Dequantize(m.Embd.Type, row, c.x[i*dim:(i+1)*dim]); err != nil {
			panic(err) // unreachable: the type was checked at load time
		}
		c.rope.Table(c.ropeCS[i*tl:(i+1)*tl], float64(ub.Pos[i]))
	}
	c.visibleCells(ub)
	for li := range m.Layers {
		l := &m.Layers[li]
		c.norm(n, l.AttnNorm)
		c.matmul(n, c.xn, []*Weight{&l.Wq, &l.Wk, &l.Wv}, [][]float32{c.q, c.k, c.v})
		for i := range n {
			cs := c.ropeCS[i*tl : (i+1)*tl]
			c.rope.Apply(c.q[i*dim:(i+1)*dim], m.HeadDim, cs)
			c.rope.Apply(c.k[i*kvDim:(i+1)*kvDim], m.HeadDim, cs)
		}
		c.storeKV(li, n)
		c.attention(li, ub)
		c.matmul(n, c.att, []*Weight{&l.Wo}, [][]float32{c.tmp})
		ops.Add(c.x[:n*dim], c.tmp[:n*dim])
		c.norm(n, l.FFNNorm)
		c.matmul(n, c.xn, []*Weight{&l.Gate, &l.Up}, [][]float32{c.gate, c.up})
		c.swiglu(n * m.FFN)
		c.matmul(n, c.gate, []*Weight{&l.Down}, [][]float32{c.tmp})
		ops.Add(c.x[:n*dim], c.tmp[:n*dim])
	}
	// Output rows: only tokens that asked for logits, packed in batch order.
	nOut, first := 0, -1
	for i := range n {
		if !ub.Logits[i] {
			continue
		}
		if first < 0 {
			first = int(c.outRows[ub.Start+i])
		}
		ops.RMSNorm(c.xn[nOut*dim:(nOut+1)*dim], c.x[i*dim:(i+1)*dim], m.OutNorm, m.Eps)
		nOut++
	}
	if nOut > 0 {
		out := c.logits[first*m.Vocab : (first+nOut)*m.Vocab]
		c.matmulInto(nOut, c.xn, &m.Output, out)
	}
}

func (c *Context) norm(n int, w []float32) {
	dim := c.m.Dim
	for i := range n {
		ops.RMSNorm(c.xn[i*dim:(i+1)*dim], c.x[i*dim:(i+1)*dim], w, c.m.Eps)
	}
}

// storeKV copies the micro-batch's K and V rows into their cache cells.
func (c *Context) storeKV(layer, n int) {
	kvDim := c.m.KVDim()
	if c.opts.KVType == kvcache.F32 {
		kc, vc := c.kv.KF32(layer), c.kv.VF32(layer)
		for i := range n {
			cell := int(c.cells[i])
			copy(kc[cell*kvDim:(cell+1)*kvDim], c.k[i*kvDim:(i+1)*kvDim])
			copy(vc[cell*kvDim:(cell+1)*kvDim], c.v[i*kvDim:(i+1)*kvDim])
		}
		return
	}
	kc, vc := c.kv.KF16(layer), c.kv.VF16(layer)
	for i := range n {
		cell := int(c.cells[i])
		quant.F32ToF16s(kc[cell*kvDim:(cell+1)*kvDim], c.k[i*kvDim:(i+1)*kvDim])
		quant.F32ToF16s(vc[cell*kvDim:(cell+1)*kvDim], c.v[i*kvDim:(i+1)*kvDim])
	}
}

// matmul computes outs[j] = x · ws[j]ᵀ for n token rows of x, quantizing x once per activation
// type and running all products as one parallel job.
func (c *Context) matmul(n int, x []float32, ws []*Weight, outs [][]float32) {
	t := &c.mm
	t.n, t.nJobs, t.total = n, len(ws), 0
	var acts [2]quant.Type
	nAct := 0
	for j, w := range ws {
		at := quant.ActType(w.Type)
		slot := -1
		for s := range nAct {
			if acts[s] == at {
				slot = s
			}
		}
		if slot < 0 {
			slot = nAct
			acts[slot] = at
			nAct++
			c.quantize(n, x[:n*w.Cols], w.Type, w.Cols, c.xq[slot])
		}
		// Small products are not worth waking the other workers for.
		chunks := max(1, min(4*c.pool.Size(), w.Rows/16))
		if w.Rows*w.Cols*n < 1<<16 {
			chunks = 1
		}
		t.jobs[j] = mmJob{w: w, xq: c.xq[slot], out: outs[j], chunks: chunks}
		t.total += chunks
	}
	c.pool.Run(t.total, t)
}

func (c *Context) matmulInto(n int, x []float32, w *Weight, out []float32) {
	c.matmul(n, x, []*Weight{w}, [][]float32{out})
}

// quantize converts n rows of k activations to the activation type of weight type wt.
func (c *Context) quantize(n int, x []float32, wt quant.Type, k int, dst []byte) {
	q := &c.qa
	q.x, q.wt, q.k, q.dst, q.rowBytes = x, wt, k, dst, quant.ActType(wt).RowSize(k)
	if n < 4 {
		for i := range n {
			q.Do(i, 0)
		}
		return
	}
	c.pool.Run(n, q)
}

type quantTask struct {
	x        []float32
	wt       quant.Type
	k        int
	dst      []byte
	rowBytes int
}

func (q *quantTask) Do(i, _ int) {
	quant.QuantizeAct(q.wt, q.x[i*q.k:(i+1)*q.k], q.dst[i*q.rowBytes:(i+1)*q.rowBytes])
}

type mmJob struct {
	w      *Weight
	xq     []byte
	out    []float32
	chunks int
}

// matmulTask splits every job's rows into chunks; piece i is one chunk of one job.
type matmulTask struct {
	jobs     [3]mmJob
	nJobs, n int
	total    int
}

func (t *matmulTask) Do(i, _ int) {
	for j := range t.nJobs {
		job := &t.jobs[j]
		if i >= job.chunks {
			i -= job.chunks
			continue
		}
		w := job.w
		if w.packed {
			r0, r1 := ops.Split(w.Rows, job.chunks, quant.PanelRows, i)
			quant.MatMulPacked(w.Type, w.Cols, w.Data, job.xq, t.n, job.out, w.Rows, r0, r1)
			return
		}
		r0, r1 := ops.Split(w.Rows, job.chunks, 4, i)
		quant.MatMul(w.dot, w.Type, w.Cols, w.Data, job.xq, t.n, job.out, w.Rows, r0, r1)
		return
	}
}

// swiglu computes gate = silu(gate)·up over the first n elements, in parallel: at prompt sizes
// the exponentials are a noticeable share of a layer.
func (c *Context) swiglu(n int) {
	t := &c.sw
	t.gate, t.up, t.n = c.gate[:n], c.up[:n], n
	t.parts = 1
	if n >= 1<<14 {
		t.parts = 4 * c.pool.Size()
	}
	c.pool.Run(t.parts, t)
}

type swigluTask struct {
	gate, up []float32
	n, parts int
}

func (t *swigluTask) Do(i, _ int) {
	lo, hi := ops.Split(t.n, t.parts, 8, i)
	ops.SwiGLU(t.gate[lo:hi], t.gate[lo:hi], t.up[lo:hi])
}

// visibleCells lists, for every token of ub, the KV cells it attends to: those among its (first)
// sequence's cells at a position <= its own. Every layer and head reuses the list.
func (c *Context) visibleCells(ub *batch.UBatch) {
	bs := int32(c.opts.BlockSize)
	c.vis = c.vis[:0]
	for t := range ub.Tokens {
		c.visOff[t] = int32(len(c.vis))
		seq, pos := int(ub.Seqs[t][0]), ub.Pos[t]
		nCells := int32(c.kv.SeqCells(seq))
		for bi, b := range c.kv.Blocks(seq) {
			for o := int32(0); o < bs && int32(bi)*bs+o < nCells; o++ {
				cell := b*bs + o
				if p := c.kv.Pos(cell); p >= 0 && p <= pos {
					c.vis = append(c.vis, cell)
				}
			}
		}
	}
	c.visOff[len(ub.Tokens)] = int32(len(c.vis))
}

// attention computes c.att for every token of ub from the cache; piece i is (token, kv head).
func (c *Context) attention(layer int, ub *batch.UBatch) {
	a := &c.attn
	a.c, a.ub, a.layer = c, ub, layer
	a.scale = float32(1 / math.Sqrt(float64(c.m.HeadDim)))
	c.pool.Run(len(ub.Tokens)*c.m.NKVHeads, a)
}

type attnTask struct {
	c     *Context
	ub    *batch.UBatch
	layer int
	scale float32
}

// Do attends token t's query heads of kv group g to every cell of the token's (first) sequence
// at a position <= its own. Tokens that belong to several sequences share their history, so the
// first sequence's block table serves them all.
func (a *attnTask) Do(i, w int) {
	c, m := a.c, a.c.m
	t, g := i/m.NKVHeads, i%m.NKVHeads
	hd, kvDim, rep := m.HeadDim, m.KVDim(), m.NHeads/m.NKVHeads

	vis := c.vis[c.visOff[t]:c.visOff[t+1]]
	nv := len(vis)
	scores := c.workerScores[w][:rep*nv]
	q := c.q[t*m.Dim+g*rep*hd:]
	out := c.att[t*m.Dim+g*rep*hd:][:rep*hd]
	f16 := c.opts.KVType == kvcache.F16
	if f16 {
		ops.AttnScoresF16(q[:rep*hd], rep, hd, c.kv.KF16(a.layer)[g*hd:], vis, kvDim, a.scale, scores)
	} else {
		ops.AttnScoresF32(q[:rep*hd], rep, hd, c.kv.KF32(a.layer)[g*hd:], vis, kvDim, a.scale, scores)
	}
	for h := range rep {
		ops.SoftmaxInPlace(scores[h*nv : (h+1)*nv])
	}
	if f16 {
		ops.AttnValuesF16(scores, rep, hd, c.kv.VF16(a.layer)[g*hd:], vis, kvDim, out)
	} else {
		ops.AttnValuesF32(scores, rep, hd, c.kv.VF32(a.layer)[g*hd:], vis, kvDim, out)
	}
}
