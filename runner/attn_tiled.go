package runner

import (
	"math"
	"slices"

	"ubatch/kvformat"
	"ubatch/ops"
)

// tokBlock is a run of tokens [t0, t1) of the micro-batch attended together: tiled, one tile of
// rows (consecutive tokens of one first sequence), or token by token (exact kernels).
//
// With Options.TiledAttention, every token is tiled where the tiled kernel has assembly (decode steps too, one row of a tile),
// and none elsewhere: a token's attention must not depend on the batch it came in (the engine
// recomputes preempted sequences in other batches, and its tests compare batched runs with
// runs alone). The tiles do not either: they are cut from the sequence's cells in table order,
// the same for every block, and a tile's cells that a row does not see leave its state exactly
// as it was (weight 0, maximum unchanged, rescaled by e^0 = 1).
type tokBlock struct {
	t0, t1 int32
	tiled  bool
}

// tileList holds, for one window, the cells each tiled block of the micro-batch sees (padded to
// whole tiles) and each token's visible range of positions (lo, pos].
type tileList struct {
	window     int32     // the window the list was built for (0: the whole history)
	cells, pos []int32   // the blocks' cells and their positions, back to back
	off        []int32   // block b's cells are cells[off[b]:off[b+1]]
	lo         []int32   // per token of the micro-batch: lo of (lo, pos]
	blocks     []tileRef // per block: where its cells are (non-tiled blocks have none)
}

type tileRef struct{ c0, c1 int32 }

// tileShape is an attention shape the tiled kernel runs (one per distinct shape of the KV
// layers): its scratch is sized by the query heads per KV head and the head size.
type tileShape struct{ rep, hd int }

// newTileWorkers makes every pool worker a tile scratch for each distinct shape of the KV
// layers, when every head size is one the tiled kernel takes (a multiple of 8).
func (c *Runtime) newTileWorkers() {
	h := c.h
	for l := range h.NKVLayers() {
		a := h.Shape(l)
		if a.HeadDim%8 != 0 {
			c.tileShapes, c.tileWorkers = nil, nil
			return
		}
		ts := tileShape{a.NHeads / a.NKVHeads, a.HeadDim}
		if slices.Contains(c.tileShapes, ts) {
			continue
		}
		c.tileShapes = append(c.tileShapes, ts)
		ws := make([]tileWorker, c.pool.Size())
		for w := range ws {
			ws[w].s = ops.NewTileScratch(ts.rep, ts.hd)
		}
		c.tileWorkers = append(c.tileWorkers, ws)
	}
}

// tileWorker is one worker's scratch for the tiled attention and the room of its KV source
// (set per call, so that passing it as an ops.TileSource allocates nothing).
type tileWorker struct {
	s  *ops.TileScratch
	kv kvformat.Tiles
}

// tiledOK reports whether this context's attention is tiled: asked for (Options.TiledAttention),
// assembly on the selected path and head dimensions the kernel takes (newTileWorkers).
func (c *Runtime) tiledOK() bool {
	return c.opts.TiledAttention && (ops.AttnTiledFast() || c.tiledGo) && c.tileShapes != nil
}

// planBlocks splits the micro-batch into tokBlocks once (every layer reuses them): when tiledOK,
// runs of consecutive tokens with the same first sequence cut into tiles of ops.TileLanes
// tokens, else one token a block. It sets c.tokTiled per token.
func (c *Runtime) planBlocks() {
	if c.planned {
		return
	}
	c.planned = true
	ub := c.ub
	c.blocks, c.nTiled = c.blocks[:0], 0
	tiled := c.tiledOK()
	for t0 := 0; t0 < c.n; {
		t1 := t0 + 1
		for t1 < c.n && t1-t0 < ops.TileLanes && ub.Seqs[t1][0] == ub.Seqs[t0][0] {
			t1++
		}
		if !tiled {
			t1 = t0 + 1
		}
		c.blocks = append(c.blocks, tokBlock{int32(t0), int32(t1), tiled})
		for t := t0; t < t1; t++ {
			c.tokTiled[t] = tiled
		}
		if tiled {
			c.nTiled++
		}
		t0 = t1
	}
}

// tileCells returns the tiled blocks' cells for window, building them on first use (as visible
// does): the cells of the block's first sequence that hold a position, in table order, cut into
// tiles of ops.TileCells; the tiles with no cell at a position in (min lo, max pos] of the
// block's tokens are left out (each token masks the rest in the kernel), and the last is padded
// with a cell no token sees.
func (c *Runtime) tileCells(window int32) *tileList {
	l, built := listFor(c.tileLists[:], &c.nTileLists, window, func(l *tileList) *int32 { return &l.window })
	if built {
		return l
	}
	ub, kv, bs := c.ub, c.kv, c.kv.BlockSize
	l.cells, l.pos, l.blocks = l.cells[:0], l.pos[:0], l.blocks[:0]
	l.lo = l.lo[:0]
	for t := range c.n {
		lo := int32(math.MinInt32)
		if window > 0 {
			lo = ub.Pos[t] - window
		}
		l.lo = append(l.lo, lo)
	}
	for _, b := range c.blocks {
		c0 := int32(len(l.cells))
		if b.tiled {
			hi, lo := int32(math.MinInt32), int32(math.MaxInt32)
			for t := b.t0; t < b.t1; t++ {
				hi, lo = max(hi, ub.Pos[t]), min(lo, l.lo[t])
			}
			seq := int(ub.Seqs[b.t0][0])
			nCells := kv.Lens[seq]
			t0, seen := len(l.cells), false // the tile being filled, and whether a token sees it
			for bi, blk := range kv.Tables[seq] {
				for o := int32(0); o < bs && int32(bi)*bs+o < nCells; o++ {
					cell := blk*bs + o
					p := kv.CellPos[cell]
					if p < 0 {
						continue
					}
					l.cells, l.pos = append(l.cells, cell), append(l.pos, p)
					seen = seen || p <= hi && p > lo
					if len(l.cells)-t0 == ops.TileCells {
						if !seen {
							l.cells, l.pos = l.cells[:t0], l.pos[:t0]
						}
						t0, seen = len(l.cells), false
					}
				}
			}
			switch {
			case len(l.cells) > t0 && !seen:
				l.cells, l.pos = l.cells[:t0], l.pos[:t0]
			case len(l.cells) > t0:
				// Pad to a whole tile with a real cell that no token sees.
				for last := l.cells[len(l.cells)-1]; len(l.cells)-t0 < ops.TileCells; {
					l.cells, l.pos = append(l.cells, last), append(l.pos, math.MaxInt32)
				}
			}
		}
		l.blocks = append(l.blocks, tileRef{c0, int32(len(l.cells))})
	}
	return l
}

// doTiled attends the query heads of kv group g of the tiled block c.blocks[bi] on worker w.
func (a *attnTask) doTiled(bi, g, w int) {
	c := a.c
	hd, rep, qd := a.hd, a.rep, a.qd
	tw := &c.tileWorkers[a.tile][w]
	f := c.store.Format()
	kvOff := f.RowBytes(g * hd) // head g's first value in a row
	src := f.Tiles(&tw.kv, c.store.K(a.layer)[kvOff:], c.store.V(a.layer)[kvOff:], c.store.RowBytes(a.layer), hd)
	b, ref := c.blocks[bi], a.tiles.blocks[bi]
	blk := ops.TileBlock{
		Pos: c.ub.Pos[b.t0:b.t1], Lo: a.tiles.lo[b.t0:b.t1],
		Cells: a.tiles.cells[ref.c0:ref.c1], CPos: a.tiles.pos[ref.c0:ref.c1],
	}
	if a.sinks != nil {
		blk.Sinks = a.sinks[g*rep : (g+1)*rep]
	}
	off := int(b.t0)*qd + g*rep*hd
	ops.AttnTiled(tw.s, src, &blk, a.q[off:], qd, rep, a.scale, a.softcap, a.out[off:], qd)
}
