package runner

import (
	"ubatch/ops"
)

// The operations below act on the micro-batch being computed (N tokens): every buffer argument
// holds N rows of the stated width, row-major, and is usually a Scratch slice.

// N is the number of tokens in the micro-batch being computed.
func (c *Runtime) N() int { return c.n }

// Embed writes the embedding rows of the micro-batch's tokens, times scale, into X.
func (c *Runtime) Embed(w *Weight, scale float32) {
	dim := c.h.Dim
	for i, tok := range c.ub.Tokens {
		x := c.S.X[i*dim : (i+1)*dim]
		w.Row(int(tok), x)
		if scale != 1 {
			for j := range x {
				x[j] *= scale
			}
		}
	}
}

// Norm writes RMSNorm(src row) * w into dst for rows of width len(w). dst may alias src.
func (c *Runtime) Norm(dst, src, w []float32) {
	width := len(w)
	for i := range c.n {
		ops.RMSNorm(dst[i*width:(i+1)*width], src[i*width:(i+1)*width], w, c.h.Eps)
	}
}

// NormHeads applies RMSNorm with weights w (len: the head size) to every head of x, in place:
// rows of heads*len(w) (per-head Q/K norms of Qwen 3 and Gemma 3).
func (c *Runtime) NormHeads(x []float32, heads int, w []float32) {
	hd := len(w)
	for i := range c.n * heads {
		ops.RMSNorm(x[i*hd:(i+1)*hd], x[i*hd:(i+1)*hd], w, c.h.Eps)
	}
}

// AddBias adds b to every row of x (rows of len(b)).
func (c *Runtime) AddBias(x, b []float32) { addRows(x, b, c.n) }

// Add adds x to dst, rows of width.
func (c *Runtime) Add(dst, x []float32, width int) {
	ops.Add(dst[:c.n*width], x[:c.n*width])
}

// Rope rotates every head of hd of every row of x (rows of heads*hd) by its token's position.
func (c *Runtime) Rope(x []float32, heads, hd int, r *ops.Rope) {
	tab := c.ropes.get(r, c.ub.Pos)
	tl, w := r.TableLen(), heads*hd
	for i := range c.n {
		r.Apply(x[i*w:(i+1)*w], hd, tab[i*tl:(i+1)*tl])
	}
}

// Unfuse copies columns [off, off+len) of every row of src (rows of srcWidth) into dst (rows of
// len): splits the output of a fused matrix (Phi-3's attn_qkv and gate+up).
func (c *Runtime) Unfuse(src []float32, srcWidth, off int, dst []float32, width int) {
	for i := range c.n {
		copy(dst[i*width:(i+1)*width], src[i*srcWidth+off:i*srcWidth+off+width])
	}
}

// Activation is a gated feed-forward activation: act(gate)·up.
type Activation int

const (
	SiLU Activation = iota // SwiGLU (Llama, Qwen, Phi-3)
	GELU                   // GELU with the tanh approximation (Gemma)
	// SwiGLUOAI is gpt-oss's clamped SwiGLU: g·sigmoid(1.702·g)·(u+1) with the gate g clamped
	// above at 7 and up u to [-7, 7] (llama.cpp's swiglu_oai, whose alpha and limit are fixed).
	SwiGLUOAI
)

// The constants of SwiGLUOAI, as llama.cpp's graph fixes them for gpt-oss.
const (
	oaiAlpha = 1.702
	oaiLimit = 7.0
)

// GLU computes gate = act(gate)·up over rows of width, in parallel: at prompt sizes the
// exponentials are a noticeable share of a layer.
func (c *Runtime) GLU(act Activation, gate, up []float32, width int) {
	c.glu(act, gate, up, c.n*width)
}

// glu is GLU over the first n elements of gate and up.
func (c *Runtime) glu(act Activation, gate, up []float32, n int) {
	t := &c.act
	t.act, t.gate, t.up, t.n = act, gate[:n], up[:n], n
	t.parts = 1
	if n >= 1<<14 {
		t.parts = 4 * c.pool.Size()
	}
	c.pool.Run(t.parts, t)
}

type actTask struct {
	act      Activation
	gate, up []float32
	n, parts int
}

func (t *actTask) Do(i, _ int) {
	lo, hi := ops.Split(t.n, t.parts, 8, i)
	switch t.act {
	case GELU:
		ops.GeGLU(t.gate[lo:hi], t.gate[lo:hi], t.up[lo:hi])
	case SwiGLUOAI:
		ops.SwiGLUOAI(t.gate[lo:hi], t.gate[lo:hi], t.up[lo:hi], oaiAlpha, oaiLimit)
	default:
		ops.SwiGLU(t.gate[lo:hi], t.gate[lo:hi], t.up[lo:hi])
	}
}

// Output writes the outputs of the micro-batch's tokens that asked for them: RMSNorm of X with
// norm, then for logits tokens times w (Vocab rows) and, when softcap > 0,
// softcap·tanh(logit/softcap) (Gemma 2). A token that asked for its hidden state (an Embeddings
// context, or batch.Batch.Hidden) keeps the normed row instead.
func (c *Runtime) Output(norm []float32, w *Weight, softcap float32) {
	dim, vocab, ub := c.h.Dim, c.h.Vocab, c.ub
	// Logits tokens are packed in batch order into XN; hidden rows go straight to their row.
	nOut, first := 0, -1
	for i := range c.n {
		if !ub.Logits[i] {
			continue
		}
		x := c.S.X[i*dim : (i+1)*dim]
		if r := c.hidRows[ub.Start+i]; r >= 0 {
			ops.RMSNorm(c.hidden[int(r)*dim:(int(r)+1)*dim], x, norm, c.h.Eps)
			continue
		}
		if first < 0 {
			first = int(c.outRows[ub.Start+i])
		}
		ops.RMSNorm(c.S.XN[nOut*dim:(nOut+1)*dim], x, norm, c.h.Eps)
		nOut++
	}
	if nOut == 0 {
		return
	}
	out := c.logits[first*vocab : (first+nOut)*vocab]
	c.mm.jobs[0] = mmJob{w: w, out: out}
	c.matmul(c.S.XN, 1, nOut) // the packed rows only
	if softcap > 0 {
		ops.Softcap(out, softcap)
	}
}

// ropeTables caches, per micro-batch, the cos/sin tables of each rope the graph uses.
type ropeTables struct {
	ropes [4]*ops.Rope
	tabs  [4][]float32
	n     int
}

func (t *ropeTables) reset() { t.n = 0 }

// get returns r's table for positions pos ([len(pos)][TableLen]), computing it on first use.
func (t *ropeTables) get(r *ops.Rope, pos []int32) []float32 {
	for i := range t.n {
		if t.ropes[i] == r {
			return t.tabs[i]
		}
	}
	if t.n == len(t.ropes) {
		panic("runner: more than four ropes in one model")
	}
	i := t.n
	t.n++
	tl := r.TableLen()
	if cap(t.tabs[i]) < len(pos)*tl {
		t.tabs[i] = make([]float32, len(pos)*tl)
	}
	tab := t.tabs[i][:len(pos)*tl]
	for j, p := range pos {
		r.Table(tab[j*tl:(j+1)*tl], float64(p))
	}
	t.ropes[i], t.tabs[i] = r, tab
	return tab
}

// GatedFFN computes Tmp = down(act(gate(XN)) · up(XN)): the gated feed-forward of most families.
func (c *Runtime) GatedFFN(act Activation, gate, up, down *Weight) {
	s := &c.S
	c.MatMul2(s.XN, gate, s.Gate, up, s.Up)
	c.GLU(act, s.Gate, s.Up, gate.Rows)
	c.MatMul(s.Gate, down, s.Tmp)
}
