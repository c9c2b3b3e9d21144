package ops

import (
	"fmt"
	"math"
	"unsafe"

	"ubatch/quant"
)

// Tiled (flash-style) attention for prompts: TileLanes query rows of one head (consecutive
// tokens of one sequence) go through the KV cells TileCells at a time, with an online softmax
// (a running maximum and sum per row, the partial output rescaled when the maximum grows), so
// that no row of scores over the whole history is ever stored and every K and V row loaded (and
// widened to float32) serves all the rows of the tile, and every head of its KV group.
//
// The queries are kept transposed, qt[d*TileLanes+i] for row i: each lane of a vector register
// is one query row, so the scores of a cell, the maxima, the exponentials and the rescaling
// are all lane-wise, with no horizontal sums. The output ot has the same layout.
//
// AttnTileStep is the kernel: the assembly (attn_tile_amd64.s, written by attn_gen.go; AVX-512)
// and attnTileStepGo compute the same operations in the same order, fused multiply-adds
// included (fma32), so the two are bit-identical; TestAttnTileAsmMatchesGo checks it. Compared
// with the exact attention (AttnScoresF16, SoftmaxInPlace, AttnValuesF16) the order of the sums
// and the exponential differ: TestAttnTiledNearExact bounds the difference (1e-5 of the largest |v| a token sees; measured below 1e-6).

const (
	TileLanes = 16 // query rows of one tile: the float32 lanes of a 512-bit register
	TileCells = 16 // KV cells of one tile
)

// TileMaxInit is the running maximum a row starts from (AttnTileStep's m): finite, so that a
// tile whose cells are all masked for a row rescales by e^0 = 1 rather than by e^(-Inf+Inf).
const TileMaxInit = -1e30

// AttnTileLoadF16 widens the TileCells rows cells[0:TileCells] (hd halves each, row c at
// k[c*stride:]) of an F16 cache into dst, row j at dst[j*hd:] (TileCells×hd floats). It panics
// if a cell's row ends past len(k), len(cells) != TileCells or dst is shorter.
func AttnTileLoadF16(dst []float32, k []uint16, cells []int32, stride, hd int) {
	checkTileLoad("AttnTileLoadF16", dst, cells, hd)
	checkCells("AttnTileLoadF16", hd, len(k), cells, stride)
	attnTileLoadF16(dst, k, cells, stride, hd)
}

// AttnTileLoadQ8 is AttnTileLoadF16 for a Q8_0 cache: a row is hd/32 blocks starting at byte
// c*strideB of k (see AttnScoresQ8); element i is the block's scale times its int8, one float32
// product, as quant's dequantization computes it.
func AttnTileLoadQ8(dst []float32, k []byte, cells []int32, strideB, hd int) {
	checkTileLoad("AttnTileLoadQ8", dst, cells, hd)
	if hd%32 != 0 {
		panic(fmt.Sprintf("ops.AttnTileLoadQ8: hd %d is not a multiple of the Q8_0 block of 32", hd))
	}
	checkCells("AttnTileLoadQ8", hd/32*q8Block, len(k), cells, strideB)
	attnTileLoadQ8(dst, k, cells, strideB, hd)
}

// AttnTileLoadF32 is AttnTileLoadF16 for a float32 cache (a copy).
func AttnTileLoadF32(dst []float32, k []float32, cells []int32, stride, hd int) {
	checkTileLoad("AttnTileLoadF32", dst, cells, hd)
	checkCells("AttnTileLoadF32", hd, len(k), cells, stride)
	for j, c := range cells {
		copy(dst[j*hd:(j+1)*hd], k[int(c)*stride:][:hd])
	}
}

func checkTileLoad(fn string, dst []float32, cells []int32, hd int) {
	if hd <= 0 || len(cells) != TileCells || len(dst) < TileCells*hd {
		panic(fmt.Sprintf("ops.%s: hd %d, %d cells, dst of %d floats (need %d cells and %d×hd floats)",
			fn, hd, len(cells), len(dst), TileCells, TileCells))
	}
}

// TileRows are the query rows of a tile: the transposed scaled queries and outputs, the
// positions that mask the cells, and the online softmax's running maximum and sum per row.
type TileRows struct {
	QT, OT []float32 // [hd][TileLanes]: scale·q of each row, and the unnormalised output
	// Row i sees a cell at position p when Lo[i] < p <= Pos[i] (Lo is Pos minus the sliding
	// window, or math.MinInt32 without one). A row without a token has Pos math.MinInt32.
	Pos, Lo [TileLanes]int32
	M, L    [TileLanes]float32 // running maximum (from TileMaxInit) and sum of e^(s-M) (from 0)
}

// AttnTileStep attends the rows r to one tile of TileCells cells: kt and vt are the tile's K and
// V rows widened to float32 (AttnTileLoad*: row j at [j*hd:]), cpos their positions (a padding
// cell has math.MaxInt32, which no row sees). For every row i and cell j it computes the score
// s = Σ_d qt[d][i]·k[j][d] (fused multiply-adds over d in order), when softcap > 0 replaces it
// with softcap·tanh(s/softcap), masks it (-Inf) unless r.Lo[i] < cpos[j] <= r.Pos[i], and
// updates the row:
//
//	M' = max(M, s_j...), c = e^(M-M'), p_j = e^(s_j-M'), L' = L·c + Σ_j p_j,
//	OT[d][i] = OT[d][i]·c + Σ_j p_j·v[j][d]
//
// The caller divides OT by L when the cells are done. hd is a multiple of 8; the slices hold
// hd×TileLanes (qt, ot) and TileCells×hd (kt, vt) floats, or it panics.
func AttnTileStep(r *TileRows, hd int, kt, vt []float32, cpos []int32, softcap float32) {
	if hd <= 0 || hd%8 != 0 || len(r.QT) < hd*TileLanes || len(r.OT) < hd*TileLanes ||
		len(kt) < TileCells*hd || len(vt) < TileCells*hd || len(cpos) != TileCells {
		panic(fmt.Sprintf("ops.AttnTileStep: hd %d (a multiple of 8), qt %d, ot %d, kt %d, vt %d floats, %d cell positions",
			hd, len(r.QT), len(r.OT), len(kt), len(vt), len(cpos)))
	}
	attnTileStep(r, hd, kt, vt, cpos, softcap)
}

// attnTileLoadF16Go is AttnTileLoadF16 without the checks.
func attnTileLoadF16Go(dst []float32, k []uint16, cells []int32, stride, hd int) {
	for j, c := range cells {
		row, o := k[int(c)*stride:][:hd], dst[j*hd:][:hd]
		for i, x := range row {
			o[i] = quant.F16ToF32(x)
		}
	}
}

// attnTileLoadQ8Go is AttnTileLoadQ8 without the checks.
func attnTileLoadQ8Go(dst []float32, k []byte, cells []int32, strideB, hd int) {
	for j, c := range cells {
		row := k[int(c)*strideB:][:hd/32*q8Block]
		for b := range hd / 32 {
			blk := row[b*q8Block:][:q8Block]
			d, o := q8Scale(blk), dst[j*hd+b*32:][:32]
			for i, x := range blk[2:] {
				o[i] = float32(int8(x)) * d
			}
		}
	}
}

// attnTileStepGo is AttnTileStep without the checks, in Go: the assembly's operations in its
// order.
func attnTileStepGo(r *TileRows, hd int, kt, vt []float32, cpos []int32, softcap float32) {
	const L = TileLanes
	var s [TileCells][L]float32
	for j := range TileCells {
		k := kt[j*hd:][:hd]
		for i := range L {
			var acc float32
			for d, x := range k {
				acc = fma32(x, r.QT[d*L+i], acc)
			}
			s[j][i] = acc
		}
	}
	if softcap > 0 {
		inv := 1 / softcap
		for j := range s {
			for i, v := range s[j] {
				s[j][i] = softcapTile(v, softcap, inv)
			}
		}
	}
	negInf := float32(math.Inf(-1))
	for j, p := range cpos {
		for i := range L {
			if r.Pos[i] < p || r.Lo[i] >= p {
				s[j][i] = negInf
			}
		}
	}
	for i := range L {
		m := r.M[i]
		for j := range s {
			if !(m > s[j][i]) {
				m = s[j][i]
			}
		}
		c := expTile(r.M[i] - m)
		sum := r.L[i] * c
		for j := range s {
			s[j][i] = expTile(s[j][i] - m)
			sum += s[j][i]
		}
		r.M[i], r.L[i] = m, sum
		for d := range hd {
			o := r.OT[d*L+i] * c
			for j := range s {
				o = fma32(s[j][i], vt[j*hd+d], o)
			}
			r.OT[d*L+i] = o
		}
	}
}

// softcapTile is cap·tanh(x·inv) as the tile kernel computes it: tanh(|y|) = (1-e)/(1+e) with
// e = e^(-2|y|), then y's sign.
func softcapTile(x, cap, inv float32) float32 {
	y := x * inv
	a := math.Float32frombits(math.Float32bits(y) &^ (1 << 31))
	e := expTile(a * -2)
	t := (1 - e) / (1 + e)
	t = math.Float32frombits(math.Float32bits(t) | math.Float32bits(y)&(1<<31))
	return t * cap
}

// The exponential of the tile kernel: act_amd64.s's EXPV (see there), whose steps are fused
// multiply-adds, each one rounding (fma32).
const (
	expLog2e      = float32(1.44269502)        // 0x3fb8aa3b
	expMagic      = float32(12582912)          // 1.5·2^23
	expLn2Hi      = float32(0.693145751953125) // 0x3f317200
	expLn2Lo      = float32(1.428606765e-06)   // 0x35bfbe8e
	expC6         = float32(0.00138145708)     // 0x3ab51202
	expC5         = float32(0.00836873055)     // 0x3c091d00
	expC4         = float32(0.041668389)       // 0x3d2aac79
	expC3         = float32(0.166665211)       // 0x3e2aaa49
	expC2         = float32(0.49999994)        // 0x3efffffe
	tileExpCutoff = float32(-60)
)

// expTile returns e^x for x <= 0 (0 below -60, for -Inf and for NaN), as the tile kernel does.
func expTile(x float32) float32 {
	if !(x >= tileExpCutoff) {
		return 0
	}
	t := fma32(x, expLog2e, expMagic)
	k := t - expMagic
	r := fma32(-k, expLn2Hi, x)
	r = fma32(-k, expLn2Lo, r)
	p := fma32(r, expC6, expC5)
	p = fma32(r, p, expC4)
	p = fma32(r, p, expC3)
	p = fma32(r, p, expC2)
	p = fma32(r, p, 1)
	p = fma32(r, p, 1)
	return math.Float32frombits(math.Float32bits(p) + math.Float32bits(t)<<23)
}

// fma32 returns a·b+c rounded once to float32, as a fused multiply-add instruction does. The
// product is exact in float64; the float64 sum is rounded to odd (its last bit set when it was
// inexact), which makes the final rounding to float32 the correct one (a float64 has more than
// 24+2 bits), where rounding the float64 sum to nearest could round twice.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	cc := float64(c)
	s := p + cc
	if bits := math.Float64bits(s); bits&1 == 0 && !math.IsInf(s, 0) && !math.IsNaN(s) {
		// Knuth's two-sum: e is the rounding error of s = p + cc.
		bb := s - p
		e := (p - (s - bb)) + (cc - bb)
		if e != 0 {
			if (e > 0) == (s > 0) {
				bits++
			} else {
				bits--
			}
			s = math.Float64frombits(bits)
		}
	}
	return float32(s)
}

// AttnTiledFast reports whether the tiled attention runs assembly on the selected kernel path
// (avx512vnni, see kernels_amd64.go): its lane and its row kernel. Elsewhere its Go twin, with fused multiply-adds emulated in float64, is slower
// than the exact kernels, and the runner uses those.
func AttnTiledFast() bool { return runsAsm(opTileStep) && runsAsm(opRowStep) }

// TileSource widens a tile of K or V rows of one KV head into float32 (AttnTileLoad*): dst gets
// TileCells rows of hd floats, row j from cells[j]; LoadKT the K rows transposed, the layout of
// a tile of AttnRowStep's ktT (AttnTileLoadKT*).
type TileSource interface {
	LoadK(dst []float32, cells []int32)
	LoadV(dst []float32, cells []int32)
	LoadKT(dst []float32, cells []int32)
	Prefetch(cells []int32) // the K and V rows of cells, into the cache ahead of their loads
	// RowV sets v to the V rows of cells (up to RowTiles tiles) for AttnRowStep: the cache's
	// own rows where the kernel reads them (F16, F32), else rows widened into dst
	// (RowTiles×TileCells×hd floats).
	RowV(v *TileV, dst []float32, cells []int32)
}

// CacheTiles is a TileSource over one cache layer of element E: uint16 for F16, float32, or byte
// for Q8_0. K and V are already offset to the KV head (for Q8_0 to its first block); rows are
// Stride elements apart (bytes for Q8_0).
type CacheTiles[E uint16 | float32 | byte] struct {
	K, V       []E
	Stride, HD int
}

func (s *CacheTiles[E]) LoadK(dst []float32, cells []int32) {
	loadTile(dst, s.K, cells, s.Stride, s.HD)
}
func (s *CacheTiles[E]) LoadV(dst []float32, cells []int32) {
	loadTile(dst, s.V, cells, s.Stride, s.HD)
}

// Prefetch asks the memory for the K and V rows of cells: the cache is streamed from memory at
// every step, and the cells, in table order, are not at a stride the hardware would prefetch.
func (s *CacheTiles[E]) Prefetch(cells []int32) {
	if len(s.K) == 0 || len(s.V) == 0 {
		return
	}
	var e E
	size := int(unsafe.Sizeof(e))
	rowBytes := s.HD * size
	if size == 1 { // Q8_0: rows of blocks, Stride in bytes
		rowBytes = s.HD / 32 * q8Block
	}
	tilePrefetch(unsafe.Pointer(&s.K[0]), unsafe.Pointer(&s.V[0]), cells, s.Stride*size, rowBytes)
}

func (s *CacheTiles[E]) RowV(v *TileV, dst []float32, cells []int32) {
	switch vv := any(s.V).(type) {
	case []uint16:
		*v = TileV{F16: vv, Cells: cells, Stride: s.Stride}
	case []float32:
		*v = TileV{F32: vv, Cells: cells, Stride: s.Stride}
	case []byte:
		for t := range len(cells) / TileCells {
			AttnTileLoadQ8(dst[t*TileCells*s.HD:], vv, cells[t*TileCells:][:TileCells], s.Stride, s.HD)
		}
		*v = TileV{F32: dst, Cells: rowCells[:len(cells)], Stride: s.HD}
	}
}

func (s *CacheTiles[E]) LoadKT(dst []float32, cells []int32) {
	switch k := any(s.K).(type) {
	case []uint16:
		AttnTileLoadKTF16(dst, k, cells, s.Stride, s.HD)
	case []float32:
		AttnTileLoadKTF32(dst, k, cells, s.Stride, s.HD)
	case []byte:
		AttnTileLoadKTQ8(dst, k, cells, s.Stride, s.HD)
	}
}

func (s *CacheTiles[E]) checkRows(cells []int32) {
	var e E
	span := s.HD
	if unsafe.Sizeof(e) == 1 { // Q8_0: rows of blocks
		if s.HD%32 != 0 {
			panic(fmt.Sprintf("ops.AttnTiled: hd %d is not a multiple of the Q8_0 block of 32", s.HD))
		}
		span = s.HD / 32 * q8Block
	}
	checkCells("AttnTiled", span, min(len(s.K), len(s.V)), cells, s.Stride)
}

func (s *CacheTiles[E]) loadGroup(ktT []float32, cells, ahead []int32) {
	if k, ok := any(s.K).([]uint16); ok { // the F16 cache's loop without the switches
		pk, pv := unsafe.Pointer(&k[0]), unsafe.Pointer(&s.V[0])
		for t := range len(cells) / TileCells {
			tilePrefetch(pk, pv, ahead[min(t*TileCells, len(ahead)):min((t+1)*TileCells, len(ahead))], 2*s.Stride, 2*s.HD)
			attnTileLoadKTF16(ktT[t*TileCells:], k, cells[t*TileCells:][:TileCells], s.Stride, s.HD)
		}
		return
	}
	for t := range len(cells) / TileCells {
		s.Prefetch(ahead[min(t*TileCells, len(ahead)):min((t+1)*TileCells, len(ahead))])
		dst, c := ktT[t*TileCells:], cells[t*TileCells:][:TileCells]
		switch k := any(s.K).(type) {
		case []float32:
			attnTileLoadKTF32(dst, k, c, s.Stride, s.HD)
		case []byte:
			attnTileLoadKTQ8(dst, k, c, s.Stride, s.HD)
		}
	}
}

// loadTile is AttnTileLoadF16, AttnTileLoadF32 or AttnTileLoadQ8, by the cache's element type.
func loadTile[E uint16 | float32 | byte](dst []float32, src []E, cells []int32, stride, hd int) {
	switch src := any(src).(type) {
	case []uint16:
		AttnTileLoadF16(dst, src, cells, stride, hd)
	case []float32:
		AttnTileLoadF32(dst, src, cells, stride, hd)
	case []byte:
		AttnTileLoadQ8(dst, src, cells, stride, hd)
	}
}

// TileScratch is one worker's memory for AttnTiled: the widened K and V tile and the rows of
// up to Heads query heads for the lane kernel; RowTiles tiles (K transposed) and the row sets of
// up to TileLanes rows for the row kernel.
type TileScratch struct {
	kt, vt   []float32
	rows     []TileRows
	ktT, vts []float32
	sets     []TileRowSet
	v        TileV
	hd       int
}

// NewTileScratch makes the scratch for heads query heads of hd dimensions.
func NewTileScratch(heads, hd int) *TileScratch {
	s := &TileScratch{kt: make([]float32, TileCells*hd), vt: make([]float32, TileCells*hd), rows: make([]TileRows, heads), hd: hd,
		ktT: make([]float32, hd*rowKTLD), vts: make([]float32, RowTiles*TileCells*hd),
		sets: make([]TileRowSet, TileLanes/RowSetRows)}
	for i := range s.rows {
		s.rows[i].QT = make([]float32, hd*TileLanes)
		s.rows[i].OT = make([]float32, hd*TileLanes)
	}
	for i := range s.sets {
		s.sets[i].Q = make([]float32, RowSetRows*hd)
		s.sets[i].O = make([]float32, RowSetRows*hd)
	}
	return s
}

// TileBlock is a block of up to TileLanes query tokens of one sequence and the KV cells any of
// them sees, padded to a multiple of TileCells (a padding cell repeats a real one, at position
// math.MaxInt32).
type TileBlock struct {
	Pos, Lo     []int32 // per token: it sees the cells at positions in (Lo, Pos]
	Cells, CPos []int32 // the cells and their positions
	// Sinks, when not nil, are the heads' sink logits (one per head of the call, in the units of
	// the scaled scores): each joins its head's softmax denominator as e^sink, with no value
	// (gpt-oss). They are applied once per row at the end, to its running maximum and sum.
	Sinks []float32
}

// rowInv is 1/(l + e^(sink-m)) for the row of head h with running maximum m and sum l: the
// row's normaliser, with the head's sink in the denominator when blk has sinks.
func rowInv(blk *TileBlock, h int, m, l float32) float32 {
	if blk.Sinks == nil {
		return 1 / l
	}
	// In float64: e^(sink-m) may exceed float32's range where a sink dwarfs every score (the
	// row's weights then all go to 0, the limit).
	return float32(1 / (float64(l) + math.Exp(float64(blk.Sinks[h])-float64(m))))
}

// AttnTiled writes the attention of heads query heads that share one KV head (src), for the
// block's tokens: out[t*outStride+h*hd:][:hd] for token t of the block and head h, from
// q[t*qStride+h*hd:][:hd], with scores scale·q·k (soft-capped when softcap > 0). heads and hd
// must fit s (NewTileScratch) and hd be a multiple of 8; the block's cells are a non-empty
// multiple of TileCells, each token sees at least one of them.
//
// The n·heads query rows (token t of head h is row h·n+t) fill the lanes of ⌈n·heads/TileLanes⌉
// TileRows, TileLanes a set: a block of 16 tokens takes one set per head, a decode token all its
// heads in one set. The lanes of the kernel never mix, so a row's result does not depend on
// which lane or set it has, nor on the other rows: the same bits for any block size.
//
// A block of few rows (useRows) takes the row kernel instead (attnTiledRows), whose results are
// the same bits, row for row.
func AttnTiled(s *TileScratch, src TileSource, blk *TileBlock, q []float32, qStride, heads int, scale, softcap float32, out []float32, outStride int) {
	n := len(blk.Pos)
	if heads > len(s.rows) || n == 0 || n > TileLanes || len(blk.Lo) != n || len(blk.Cells) != len(blk.CPos) ||
		len(blk.Cells) == 0 || len(blk.Cells)%TileCells != 0 || blk.Sinks != nil && len(blk.Sinks) < heads {
		panic(fmt.Sprintf("ops.AttnTiled: %d heads (scratch for %d), %d tokens, %d cells, %d sinks", heads, len(s.rows), n, len(blk.Cells), len(blk.Sinks)))
	}
	attnTiledWith(useRows(n*heads, s.hd), s, src, blk, q, qStride, heads, scale, softcap, out, outStride)
}

// attnTiledWith is AttnTiled with the kernel chosen: the row kernel when rows, else the lanes.
func attnTiledWith(rows bool, s *TileScratch, src TileSource, blk *TileBlock, q []float32, qStride, heads int, scale, softcap float32, out []float32, outStride int) {
	if rows {
		attnTiledRows(s, src, blk, q, qStride, heads, scale, softcap, out, outStride)
	} else {
		attnTiledLanes(s, src, blk, q, qStride, heads, scale, softcap, out, outStride)
	}
}

// attnTiledLanes is AttnTiled with the lane kernel (AttnTileStep).
func attnTiledLanes(s *TileScratch, src TileSource, blk *TileBlock, q []float32, qStride, heads int, scale, softcap float32, out []float32, outStride int) {
	hd, n := s.hd, len(blk.Pos)
	nRows := n * heads
	sets := (nRows + TileLanes - 1) / TileLanes // <= heads, as n <= TileLanes
	for si := range sets {
		r := &s.rows[si]
		clear(r.QT)
		clear(r.OT)
		for i := range TileLanes {
			r.Pos[i], r.Lo[i] = math.MinInt32, math.MinInt32
			r.M[i], r.L[i] = TileMaxInit, 0
		}
	}
	for k := range nRows {
		h, t := k/n, k%n
		r, i := &s.rows[k/TileLanes], k%TileLanes
		r.Pos[i], r.Lo[i] = blk.Pos[t], blk.Lo[t]
		for d, x := range q[t*qStride+h*hd:][:hd] {
			r.QT[d*TileLanes+i] = scale * x
		}
	}
	for c0 := 0; c0 < len(blk.Cells); c0 += TileCells {
		cells, cpos := blk.Cells[c0:c0+TileCells], blk.CPos[c0:c0+TileCells]
		src.Prefetch(blk.Cells[c0+TileCells : min(c0+2*TileCells, len(blk.Cells))])
		src.LoadK(s.kt, cells)
		src.LoadV(s.vt, cells)
		for si := range sets {
			AttnTileStep(&s.rows[si], hd, s.kt, s.vt, cpos, softcap)
		}
	}
	for k := range nRows {
		h, t := k/n, k%n
		r, i := &s.rows[k/TileLanes], k%TileLanes
		o, inv := out[t*outStride+h*hd:][:hd], rowInv(blk, h, r.M[i], r.L[i])
		for d := range o {
			o[d] = r.OT[d*TileLanes+i] * inv
		}
	}
}
