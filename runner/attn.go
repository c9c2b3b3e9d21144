package runner

import (
	"math"
	"slices"

	"ubatch/ops"
)

// AttnParams describe one layer's self-attention.
type AttnParams struct {
	Scale   float32 // multiplies q·k; 0 means 1/sqrt(the layer's head size)
	Softcap float32 // when > 0, scores become Softcap*tanh(score/Softcap) before the softmax (Gemma 2)
	// Window, when > 0, limits a token at position p to the cells at positions (p-Window, p]:
	// sliding-window attention (Gemma, Mistral's SWA layers).
	Window int32
	// Sinks, when not nil, hold a sink logit per query head ([NHeads]; gpt-oss's attn_sinks):
	// each joins its head's softmax denominator as e^sink, with no value, so that a head may
	// attend to little. Every path applies them: the exact one in its softmax, the tiled one to
	// each row's running maximum and sum.
	Sinks []float32
}

// visList lists, for every token of the micro-batch, the KV cells it attends to: token t's cells
// are cells[off[t]:off[t+1]].
type visList struct {
	window int32 // the window (0: the whole history) the list was built for
	cells  []int32
	off    []int32
}

// listFor returns the entry of lists[:*n] whose window (at win) is window, or claims the next
// entry for it (built false: the caller builds it). A micro-batch uses at most two windows (full
// and sliding).
func listFor[L any](lists []L, n *int, window int32, win func(*L) *int32) (l *L, built bool) {
	for i := range *n {
		if l = &lists[i]; *win(l) == window {
			return l, true
		}
	}
	if *n == len(lists) {
		panic("runner: more than two attention windows in one model")
	}
	l = &lists[*n]
	*n++
	*win(l) = window
	return l, false
}

// SelfAttention is a decoder block's attention after the Q, K and V projections: it rotates
// S.Q and S.K by rope, attends KV layer li (Attention, S.V into S.Att; Hparams.Shape(li) its
// shape) and projects the result by wo into S.Tmp, for the family to add to the residual S.X.
func (c *Runtime) SelfAttention(li int, rope *ops.Rope, p AttnParams, wo *Weight) {
	s, a := &c.S, c.h.Shape(li)
	c.Rope(s.Q, a.NHeads, a.HeadDim, rope)
	c.Rope(s.K, a.NKVHeads, a.HeadDim, rope)
	c.Attention(li, s.Q, s.K, s.V, s.Att, p)
	c.MatMul(s.Att, wo, s.Tmp)
}

// SharedAttention is SelfAttention for a layer that reuses KV layer src's keys and values
// (Gemma 4's shared KV layers, attention.shared_kv_layers): it rotates S.Q by rope and attends
// src's cells as they are, this micro-batch's rows among them (src came earlier in the pass),
// storing nothing.
func (c *Runtime) SharedAttention(src int, rope *ops.Rope, p AttnParams, wo *Weight) {
	s, a := &c.S, c.h.Shape(src)
	c.Rope(s.Q, a.NHeads, a.HeadDim, rope)
	c.Attention(src, s.Q, nil, nil, s.Att, p)
	c.MatMul(s.Att, wo, s.Tmp)
}

// Attention stores the micro-batch's k and v rows ([n][KVDim] of layer's shape, Hparams.Shape)
// in layer's KV cells (nil k and v: it stores nothing, the layer's cells hold them already),
// then writes to out ([n][QDim]) the attention of every query head of q ([n][QDim]) over the
// cells its token sees: its (first) sequence's cells at positions <= its own, within p.Window.
// Query head h reads kv head h / (NHeads/NKVHeads).
//
// Where the tiled kernel has assembly (ops.AttnTiledFast), blocks of up to ops.TileLanes
// consecutive tokens of one sequence go through it together (ops.AttnTiled, attn_tiled.go);
// elsewhere every token goes through the exact kernels on its own.
func (c *Runtime) Attention(layer int, q, k, v, out []float32, p AttnParams) {
	if k != nil {
		c.storeKV(layer, k, v)
	}
	a, sh := &c.attn, c.h.Shape(layer)
	a.c, a.layer, a.q, a.out, a.softcap, a.sinks = c, layer, q, out, p.Softcap, p.Sinks
	a.hd, a.rep, a.qd, a.nkv = sh.HeadDim, sh.NHeads/sh.NKVHeads, sh.QDim(), sh.NKVHeads
	a.tile = slices.Index(c.tileShapes, tileShape{a.rep, a.hd})
	a.scale = p.Scale
	if a.scale == 0 {
		a.scale = float32(1 / math.Sqrt(float64(sh.HeadDim)))
	}
	c.planBlocks()
	a.vis = c.visible(p.Window, true)
	a.tiles = nil
	if c.nTiled > 0 {
		a.tiles = c.tileCells(p.Window)
	}
	c.pool.Run(len(c.blocks)*a.nkv, a)
}

// storeKV writes the micro-batch's K and V rows into their cells (the batch's slot mapping).
func (c *Runtime) storeKV(layer int, k, v []float32) {
	kvDim := c.h.Shape(layer).KVDim()
	c.store.Write(layer, c.cells, k[:c.n*kvDim], v[:c.n*kvDim])
}

// visible returns the micro-batch's visible-cell lists for window (0: the whole history),
// building them on first use: every layer and head with that window reuses them. A micro-batch
// uses at most two windows (full and sliding). With skipTiled the tokens of tiled blocks
// (planBlocks) get empty lists: the tiled kernel reads their cells from tileCells. The first
// call of a window decides.
func (c *Runtime) visible(window int32, skipTiled bool) *visList {
	l, built := listFor(c.vis[:], &c.nVis, window, func(l *visList) *int32 { return &l.window })
	if built {
		return l
	}
	ub, kv := c.ub, c.kv
	bs := kv.BlockSize
	l.cells = l.cells[:0]
	for t := range ub.Tokens {
		l.off[t] = int32(len(l.cells))
		if skipTiled && c.tokTiled[t] {
			continue
		}
		seq, pos := int(ub.Seqs[t][0]), ub.Pos[t]
		lo := int32(math.MinInt32)
		if window > 0 {
			lo = pos - window
		}
		nCells := kv.Lens[seq]
		for bi, b := range kv.Tables[seq] {
			for o := int32(0); o < bs && int32(bi)*bs+o < nCells; o++ {
				cell := b*bs + o
				if p := kv.CellPos[cell]; p >= 0 && p <= pos && p > lo {
					l.cells = append(l.cells, cell)
				}
			}
		}
	}
	l.off[len(ub.Tokens)] = int32(len(l.cells))
	return l
}

type attnTask struct {
	c              *Runtime
	vis            *visList
	tiles          *tileList // nil when no block is tiled
	layer          int
	q, out         []float32
	scale, softcap float32
	sinks          []float32 // per query head, or nil
	// The layer's shape: head size, query heads per KV head, query row width, KV heads; and
	// its tile scratch (an index of tileShapes).
	hd, rep, qd, nkv, tile int
}

// Do attends the query heads of kv group g of one block of tokens (the last blocks first: they
// see the most cells) to their visible cells: the whole block through the tiled kernel, or
// token by token. Tokens that belong to several sequences share their history, so the first
// sequence's block table serves them all.
func (a *attnTask) Do(i, w int) {
	c := a.c
	bi, g := len(c.blocks)-1-i/a.nkv, i%a.nkv
	b := c.blocks[bi]
	if b.tiled {
		a.doTiled(bi, g, w)
		return
	}
	for t := b.t0; t < b.t1; t++ {
		a.doToken(int(t), g, w)
	}
}

// doToken attends token t's query heads of kv group g to the token's visible cells with the
// exact kernels: all the scores, their softmax, the weighted values.
func (a *attnTask) doToken(t, g, w int) {
	c := a.c
	hd, rep, qd := a.hd, a.rep, a.qd

	vis := a.vis.cells[a.vis.off[t]:a.vis.off[t+1]]
	nv := len(vis)
	scores := c.workerScores[w][:rep*nv]
	q := a.q[t*qd+g*rep*hd:][:rep*hd]
	out := a.out[t*qd+g*rep*hd:][:rep*hd]
	f, rb := c.store.Format(), c.store.RowBytes(a.layer)
	off := f.RowBytes(g * hd) // head g's first value in a row (New checked hd against f.Align)
	f.Scores(q, rep, hd, c.store.K(a.layer)[off:], vis, rb, a.scale, scores)
	if a.softcap > 0 {
		ops.Softcap(scores, a.softcap)
	}
	for hh := range rep {
		if a.sinks != nil {
			ops.SoftmaxSinkInPlace(scores[hh*nv:(hh+1)*nv], a.sinks[g*rep+hh])
		} else {
			ops.SoftmaxInPlace(scores[hh*nv : (hh+1)*nv])
		}
	}
	f.Values(scores, rep, hd, c.store.V(a.layer)[off:], vis, rb, out)
}
