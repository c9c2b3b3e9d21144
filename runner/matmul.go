package runner

import (
	"ubatch/ops"
	"ubatch/quant"
)

// MatMul computes out = x · wᵀ for the micro-batch's rows: x is [n][w.Cols], out [n][w.Rows].
func (c *Runtime) MatMul(x []float32, w *Weight, out []float32) {
	c.mm.jobs[0] = mmJob{w: w, out: out}
	c.matmul(x, 1, c.n)
}

// MatMul2 is two MatMuls over the same input as one parallel job (e.g. gate and up).
func (c *Runtime) MatMul2(x []float32, w0 *Weight, out0 []float32, w1 *Weight, out1 []float32) {
	c.mm.jobs[0], c.mm.jobs[1] = mmJob{w: w0, out: out0}, mmJob{w: w1, out: out1}
	c.matmul(x, 2, c.n)
}

// MatMul3 is three MatMuls over the same input as one parallel job (e.g. Q, K and V).
func (c *Runtime) MatMul3(x []float32, w0 *Weight, out0 []float32, w1 *Weight, out1 []float32, w2 *Weight, out2 []float32) {
	c.mm.jobs[0], c.mm.jobs[1], c.mm.jobs[2] = mmJob{w: w0, out: out0}, mmJob{w: w1, out: out1}, mmJob{w: w2, out: out2}
	c.matmul(x, 3, c.n)
}

// matmul runs the first nJobs of c.mm.jobs over n rows of x, quantizing x once per activation
// type.
func (c *Runtime) matmul(x []float32, nJobs, n int) {
	t := &c.mm
	t.n, t.nJobs, t.total = n, nJobs, 0
	var acts [2]quant.Type
	nAct := 0
	for j := range nJobs {
		job := &t.jobs[j]
		w := job.w
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
			c.quantize(x[:n*w.Cols], n, w.Type, w.Cols, c.xq[slot])
		}
		// Small products are not worth waking the other workers for.
		job.chunks = max(1, min(4*c.pool.Size(), w.Rows/16))
		if w.Rows*w.Cols*n < 1<<16 {
			job.chunks = 1
		}
		job.xq = c.xq[slot]
		job.sums = nil
		if need := quant.SumsLen(w.Type, w.Cols, n); w.packed && need > 0 {
			if len(c.mmSums[j]) < need { // sized by New; only a later kernel path change needs more
				c.mmSums[j] = make([]int32, need)
			}
			job.sums = c.mmSums[j]
			quant.PanelSums(w.Type, w.Cols, job.xq, n, job.sums)
		}
		t.total += job.chunks
	}
	if c.gemm != nil {
		c.gemm.run(t, c.pool)
		return
	}
	c.pool.Run(t.total, t)
}

// quantize converts n rows of k activations to the activation type of weight type wt.
func (c *Runtime) quantize(x []float32, n int, wt quant.Type, k int, dst []byte) {
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
	sums   []int32 // packed weights: the activation sums of xq, nil where they take none
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
			// Pairs of panels: the prompt kernels run four or two at once (AVX-512) or two
			// (AVX2), an odd one alone; a range of 2 mod 4 panels leaves a pair to the pair kernel.
			r0, r1 := ops.Split(w.Rows, job.chunks, 2*quant.PanelRows, i)
			quant.MatMulPackedSums(w.Type, w.Cols, w.Data, job.xq, job.sums, t.n, job.out, w.Rows, r0, r1)
			return
		}
		r0, r1 := ops.Split(w.Rows, job.chunks, 4, i)
		quant.MatMul(w.dot, w.Type, w.Cols, w.Data, job.xq, t.n, job.out, w.Rows, r0, r1)
		return
	}
}
