package ops

import (
	"fmt"
	"math"

	"ubatch/quant"
)

// The row layout of the tiled attention, for blocks of few query rows (a decode token's heads of
// one KV group): the lane kernel (AttnTileStep) costs TileCells×hd multiply-adds per tile for the
// scores and as many for the values however many of its TileLanes rows are used. The row kernel
// (AttnRowStep) puts the cells in the lanes for the scores, from the K tile transposed
// (AttnTileLoadKT*: column d of the tile, its 16 cells, is one vector), and the dimensions in the
// lanes for the values (V rows as they are, each weight broadcast), so that its work is
// proportional to the rows.
//
// It computes, for every row, the operations of AttnTileStep for that row in the same order:
// the score of a cell is the same chain of fused multiply-adds over d (fma(k, q, acc) is
// fma(q, k, acc)), the soft cap, the mask and the exponentials are lane-wise the same, the
// maximum is folded over the cells in order with the same comparison (NaN included), the sum
// adds the weights one by one in cell order, and an output is rescaled then accumulated over the
// cells in order. So a row's M, L and outputs have the bits of AttnTileStep's for it, whichever
// kernel its block takes (TestAttnRowMatchesLanes), and AttnTiled may choose by speed alone.

const (
	RowTiles   = 4 // tiles whose scores the row kernel computes at once: independent chains in flight
	RowSetRows = 4 // query rows of a TileRowSet, unrolled in the row kernel
	rowKTLD    = RowTiles * TileCells
)

// TileRowSet holds up to RowSetRows query rows in the row layout: row i's scaled query and
// unnormalised output at Q[i*hd:] and O[i*hd:], its positions and its online softmax's state
// (as TileRows' lane i). N is the number of rows; scr is the kernel's scratch (the scores of
// RowTiles tiles, then the weights of one).
type TileRowSet struct {
	Q, O    []float32 // [RowSetRows][hd]
	Pos, Lo [RowSetRows]int32
	M, L    [RowSetRows]float32
	N       int
	scr     [RowTiles*RowSetRows*TileCells + RowSetRows*TileCells]float32
}

// TileV is where the row kernel reads the V rows of its tiles: cell j's row (hd elements) at
// [Cells[j]*Stride:] of F16 (halves) when it is not nil, else of F32 (floats, an F32 cache or
// rows widened from Q8_0).
type TileV struct {
	F16    []uint16
	F32    []float32
	Cells  []int32
	Stride int
}

// AttnRowStep attends the r.N rows of r (1 <= r.N <= RowSetRows) to len(cpos)/TileCells tiles
// (1 to RowTiles), as AttnTileStep would each row: ktT holds the K tiles transposed, column d of
// tile t (its TileCells cells) at ktT[(d*RowTiles+t)*TileCells:] (AttnTileLoadKT* into
// ktT[t*TileCells:]), hd×RowTiles×TileCells floats whatever the tiles (the columns of tiles past
// the last are read, their scores unused); v has their V rows, v.Cells[t*TileCells+j] tile t's
// cell j; cpos their positions. hd is a multiple of 16, or it panics.
func AttnRowStep(r *TileRowSet, hd int, ktT []float32, v *TileV, cpos []int32, softcap float32) {
	tiles := len(cpos) / TileCells
	if hd <= 0 || hd%16 != 0 || r.N < 1 || r.N > RowSetRows || len(r.Q) < r.N*hd || len(r.O) < r.N*hd ||
		len(ktT) < hd*rowKTLD || tiles < 1 || tiles > RowTiles || len(cpos)%TileCells != 0 || len(v.Cells) < len(cpos) {
		panic(fmt.Sprintf("ops.AttnRowStep: hd %d (a multiple of 16), %d rows, q %d, o %d, ktT %d floats, %d cell positions, %d V cells",
			hd, r.N, len(r.Q), len(r.O), len(ktT), len(cpos), len(v.Cells)))
	}
	n := len(v.F32)
	if v.F16 != nil {
		n = len(v.F16)
	}
	checkCells("AttnRowStep", hd, n, v.Cells[:len(cpos)], v.Stride)
	if !(softcap > 0) {
		softcap = 0
	}
	attnRowStep(r, hd, ktT, v, cpos, softcap)
}

// AttnTileLoadKTF16 widens the TileCells rows cells[0:TileCells] of an F16 cache (as
// AttnTileLoadF16) into dst transposed: k[j][d] at dst[d*RowTiles*TileCells+j], the layout of
// one tile of AttnRowStep's ktT. hd is a multiple of 16; it panics if a cell's row ends past
// len(k) or dst is shorter than (hd-1)*RowTiles*TileCells+TileCells.
func AttnTileLoadKTF16(dst []float32, k []uint16, cells []int32, stride, hd int) {
	checkTileLoadKT("AttnTileLoadKTF16", dst, cells, hd, 16)
	checkCells("AttnTileLoadKTF16", hd, len(k), cells, stride)
	attnTileLoadKTF16(dst, k, cells, stride, hd)
}

// AttnTileLoadKTF32 is AttnTileLoadKTF16 for a float32 cache.
func AttnTileLoadKTF32(dst []float32, k []float32, cells []int32, stride, hd int) {
	checkTileLoadKT("AttnTileLoadKTF32", dst, cells, hd, 16)
	checkCells("AttnTileLoadKTF32", hd, len(k), cells, stride)
	attnTileLoadKTF32(dst, k, cells, stride, hd)
}

// AttnTileLoadKTQ8 is AttnTileLoadKTF16 for a Q8_0 cache (as AttnTileLoadQ8; hd a multiple of 32).
func AttnTileLoadKTQ8(dst []float32, k []byte, cells []int32, strideB, hd int) {
	checkTileLoadKT("AttnTileLoadKTQ8", dst, cells, hd, 32)
	checkCells("AttnTileLoadKTQ8", hd/32*q8Block, len(k), cells, strideB)
	attnTileLoadKTQ8(dst, k, cells, strideB, hd)
}

func checkTileLoadKT(fn string, dst []float32, cells []int32, hd, mult int) {
	if hd <= 0 || hd%mult != 0 || len(cells) != TileCells || len(dst) < (hd-1)*rowKTLD+TileCells {
		panic(fmt.Sprintf("ops.%s: hd %d (a multiple of %d), %d cells, dst of %d floats (need %d cells and %d)",
			fn, hd, mult, len(cells), len(dst), TileCells, (hd-1)*rowKTLD+TileCells))
	}
}

// attnTileLoadKTF16Go is AttnTileLoadKTF16 without the checks: AttnTileLoadF16's values,
// transposed.
func attnTileLoadKTF16Go(dst []float32, k []uint16, cells []int32, stride, hd int) {
	for j, c := range cells {
		for d, x := range k[int(c)*stride:][:hd] {
			dst[d*rowKTLD+j] = quant.F16ToF32(x)
		}
	}
}

// attnTileLoadKTF32Go is AttnTileLoadKTF32 without the checks.
func attnTileLoadKTF32Go(dst []float32, k []float32, cells []int32, stride, hd int) {
	for j, c := range cells {
		for d, x := range k[int(c)*stride:][:hd] {
			dst[d*rowKTLD+j] = x
		}
	}
}

// attnTileLoadKTQ8Go is AttnTileLoadKTQ8 without the checks.
func attnTileLoadKTQ8Go(dst []float32, k []byte, cells []int32, strideB, hd int) {
	for j, c := range cells {
		row := k[int(c)*strideB:][:hd/32*q8Block]
		for b := range hd / 32 {
			blk := row[b*q8Block:][:q8Block]
			s := q8Scale(blk)
			for i, x := range blk[2:] {
				dst[(b*32+i)*rowKTLD+j] = float32(int8(x)) * s
			}
		}
	}
}

// attnRowStepGo is AttnRowStep without the checks, in Go: the assembly's operations in its
// order, which per row are attnTileStepGo's.
func attnRowStepGo(r *TileRowSet, hd int, ktT []float32, v *TileV, cpos []int32, softcap float32) {
	var s, p [TileCells]float32
	vrow := func(cell int32, d int) float32 {
		if v.F16 != nil {
			return quant.F16ToF32(v.F16[int(cell)*v.Stride+d])
		}
		return v.F32[int(cell)*v.Stride+d]
	}
	negInf := float32(math.Inf(-1))
	for t := range len(cpos) / TileCells {
		for i := range r.N {
			q := r.Q[i*hd:][:hd]
			for j := range s {
				var acc float32
				for d, x := range q {
					acc = fma32(ktT[(d*RowTiles+t)*TileCells+j], x, acc)
				}
				s[j] = acc
			}
			if softcap > 0 {
				inv := 1 / softcap
				for j, v := range s {
					s[j] = softcapTile(v, softcap, inv)
				}
			}
			for j, cp := range cpos[t*TileCells:][:TileCells] {
				if cp > r.Pos[i] || cp <= r.Lo[i] {
					s[j] = negInf
				}
			}
			m := r.M[i]
			for _, v := range s {
				if !(m > v) {
					m = v
				}
			}
			c := expTile(r.M[i] - m)
			sum := r.L[i] * c
			for j, v := range s {
				p[j] = expTile(v - m)
				sum += p[j]
			}
			r.M[i], r.L[i] = m, sum
			o, cells := r.O[i*hd:][:hd], v.Cells[t*TileCells:][:TileCells]
			for d := range o {
				acc := o[d] * c
				for j, w := range p {
					acc = fma32(w, vrow(cells[j], d), acc)
				}
				o[d] = acc
			}
		}
	}
}

// rowKernelMax is the most rows (n·heads) of a block for which AttnTiled takes the row kernel,
// whose work grows with the rows where the lane kernel's is per tile of 16 rows. Measured on
// Zen 5 (hd 64, 2048 cells, 12 layers × 4 KV heads of F16 cache, CPU time): 3 rows 2.3 ms
// against 4.3 ms with the lanes; 8 rows 3.8-4.0 against 4.3-4.9 (cache from memory), 3.4-3.6
// against 3.2-3.4 (cache hot).
const rowKernelMax = 8

// useRows reports whether AttnTiled takes the row kernel for a block of nRows rows.
func useRows(nRows, hd int) bool { return nRows <= rowKernelMax && hd%16 == 0 }

// attnTiledRows is AttnTiled with the row kernel: the nRows rows (row k = h·n+t) in
// ⌈nRows/RowSetRows⌉ TileRowSets of as equal sizes as can be; RowTiles tiles at a time loaded
// (K transposed) and attended by every set.
func attnTiledRows(s *TileScratch, src TileSource, blk *TileBlock, q []float32, qStride, heads int, scale, softcap float32, out []float32, outStride int) {
	hd, n := s.hd, len(blk.Pos)
	nRows := n * heads
	sets := (nRows + RowSetRows - 1) / RowSetRows
	if sets > len(s.sets) {
		panic(fmt.Sprintf("ops.AttnTiled: %d rows for the row kernel (at most %d)", nRows, len(s.sets)*RowSetRows))
	}
	for si := range sets {
		r := &s.sets[si]
		k0, k1 := si*nRows/sets, (si+1)*nRows/sets
		r.N = k1 - k0
		clear(r.O[:r.N*hd])
		for i := range r.N {
			k := k0 + i
			h, t := k/n, k%n
			r.Pos[i], r.Lo[i] = blk.Pos[t], blk.Lo[t]
			r.M[i], r.L[i] = TileMaxInit, 0
			for d, x := range q[t*qStride+h*hd:][:hd] {
				r.Q[i*hd+d] = scale * x
			}
		}
	}
	if !(softcap > 0) {
		softcap = 0
	}
	// A CacheTiles has the block's cells checked once, then loaded and read unchecked; any other
	// source through its methods and AttnRowStep, every tile checked.
	fast, _ := src.(rowSource)
	if fast != nil {
		fast.checkRows(blk.Cells)
	}
	const group = RowTiles * TileCells
	// The rows of a group are prefetched two groups ahead (measured faster than one or four, on
	// a cache streamed from memory), the first two groups here.
	src.Prefetch(blk.Cells[:min(2*group, len(blk.Cells))])
	for c0 := 0; c0 < len(blk.Cells); c0 += group {
		c1 := min(c0+group, len(blk.Cells))
		ahead := blk.Cells[min(c0+2*group, len(blk.Cells)):min(c0+3*group, len(blk.Cells))]
		if fast != nil {
			fast.loadGroup(s.ktT, blk.Cells[c0:c1], ahead)
		} else {
			for t := range (c1 - c0) / TileCells {
				src.Prefetch(ahead[min(t*TileCells, len(ahead)):min((t+1)*TileCells, len(ahead))])
				src.LoadKT(s.ktT[t*TileCells:], blk.Cells[c0+t*TileCells:][:TileCells])
			}
		}
		src.RowV(&s.v, s.vts, blk.Cells[c0:c1])
		for si := range sets {
			if fast != nil {
				attnRowStep(&s.sets[si], hd, s.ktT, &s.v, blk.CPos[c0:c1], softcap)
			} else {
				AttnRowStep(&s.sets[si], hd, s.ktT, &s.v, blk.CPos[c0:c1], softcap)
			}
		}
	}
	for si := range sets {
		r := &s.sets[si]
		k0 := si * nRows / sets
		for i := range r.N {
			k := k0 + i
			h, t := k/n, k%n
			o, inv := out[t*outStride+h*hd:][:hd], rowInv(blk, h, r.M[i], r.L[i])
			for d := range o {
				o[d] = r.O[i*hd+d] * inv
			}
		}
	}
}

// rowSource is a TileSource that checks a block's cells once for the row kernel (CacheTiles):
// checkRows panics unless the K and V rows of every cell are inside the cache, after which
// loadGroup loads tiles unchecked and the rows RowV gives may be read unchecked. loadGroup
// loads the K tiles of cells (1 to RowTiles) transposed into ktT (LoadKT into ktT[t*TileCells:]
// for tile t), before each prefetching the tile of ahead at its place (those it has).
type rowSource interface {
	checkRows(cells []int32)
	loadGroup(ktT []float32, cells, ahead []int32)
}

// rowCells are the cells 0 .. RowTiles·TileCells-1: TileV.Cells of rows widened in order.
var rowCells = func() (c [RowTiles * TileCells]int32) {
	for i := range c {
		c[i] = int32(i)
	}
	return c
}()
