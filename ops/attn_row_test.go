package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ubatch/quant"
)

// newRowSet makes a row set whose row i is lane idx[i] of lanes (newTileRows: random queries, a
// running state as after earlier tiles), so that both kernels start equal.
func newRowSet(lanes *TileRows, idx []int, hd int) *TileRowSet {
	r := &TileRowSet{Q: make([]float32, RowSetRows*hd), O: make([]float32, RowSetRows*hd), N: len(idx)}
	for i, k := range idx {
		for d := range hd {
			r.Q[i*hd+d], r.O[i*hd+d] = lanes.QT[d*TileLanes+k], lanes.OT[d*TileLanes+k]
		}
		r.Pos[i], r.Lo[i], r.M[i], r.L[i] = lanes.Pos[k], lanes.Lo[k], lanes.M[k], lanes.L[k]
	}
	return r
}

func firstLanes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// randTiles returns RowTiles random K and V tiles: K transposed (ktT) and as rows (kts, one
// slice a tile), V as rows, and cell positions in [0, 64) with a padding cell per tile; nanCell
// >= 0 puts a NaN in that cell's K (every row's score of it NaN).
func randTiles(r *rand.Rand, hd int, sigma float64, nanCell int) (ktT []float32, kts [][]float32, vt []float32, cpos []int32) {
	ktT, vt = make([]float32, hd*rowKTLD), make([]float32, RowTiles*TileCells*hd)
	for t := range RowTiles {
		kt := make([]float32, TileCells*hd)
		for i := range kt {
			kt[i] = float32(r.NormFloat64() * sigma)
		}
		if nanCell >= 0 {
			kt[nanCell*hd+r.IntN(hd)] = float32(math.NaN())
		}
		for j := range TileCells {
			for d := range hd {
				ktT[(d*RowTiles+t)*TileCells+j] = kt[j*hd+d]
			}
		}
		kts = append(kts, kt)
	}
	for i := range vt {
		vt[i] = float32(r.NormFloat64())
	}
	cpos = make([]int32, RowTiles*TileCells)
	for j := range cpos {
		cpos[j] = int32(r.IntN(64))
	}
	for t := range RowTiles {
		cpos[t*TileCells+r.IntN(TileCells)] = math.MaxInt32
	}
	return ktT, kts, vt, cpos
}

// rowTileV returns vt's rows (RowTiles tiles of TileCells rows of hd floats) as the row kernel
// reads them: in a shuffled order of cells, padded, as halves when f16 (then vt's values are
// rounded to halves in place, so that vt holds what the row kernel reads).
func rowTileV(r *rand.Rand, vt []float32, hd int, f16 bool) *TileV {
	if f16 {
		for i, x := range vt {
			vt[i] = quant.F16ToF32(quant.F32ToF16(x))
		}
	}
	const pad = 3
	n := RowTiles * TileCells
	perm := r.Perm(n)
	v := &TileV{Cells: make([]int32, n), Stride: hd + pad}
	if f16 {
		v.F16 = make([]uint16, n*v.Stride)
	} else {
		v.F32 = make([]float32, n*v.Stride)
	}
	for j := range n {
		v.Cells[j] = int32(perm[j])
		for d := range hd {
			if f16 {
				v.F16[perm[j]*v.Stride+d] = quant.F32ToF16(vt[j*hd+d])
			} else {
				v.F32[perm[j]*v.Stride+d] = vt[j*hd+d]
			}
		}
	}
	return v
}

// sameOrNaN reports whether a and b have the same bits or are both NaN (whose payload the
// hardware and the Go twins may set differently).
func sameOrNaN(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// TestAttnRowAsmMatchesGo: the AVX-512 row kernel and its Go twin agree to the bit over several
// calls of 1 to RowTiles tiles, for 1 to RowSetRows rows, with and without soft cap and window,
// scores small and large.
func TestAttnRowAsmMatchesGo(t *testing.T) {
	if !runsAsm(opRowStep) {
		t.Skip("no tiled attention assembly on this kernel path: the Go twin would be compared with itself")
	}
	type tc struct {
		name     string
		hd, rows int
		softcap  float32
		window   bool
		sigma    float64
		f16      bool
	}
	var cases []tc
	for _, f16 := range []bool{false, true} {
		for _, hd := range []int{16, 32, 48, 64, 80, 128, 256} {
			for rows := 1; rows <= RowSetRows; rows++ {
				for _, softcap := range []float32{0, 20} {
					for _, window := range []bool{false, true} {
						for _, sigma := range []float64{0.3, 3} {
							cases = append(cases, tc{fmt.Sprintf("f16=%v/hd=%d/rows=%d/softcap=%g/window=%v/sigma=%g", f16, hd, rows, softcap, window, sigma),
								hd, rows, softcap, window, sigma, f16})
						}
					}
				}
			}
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.hd*c.rows), uint64(c.softcap)+uint64(c.sigma*10)))
			fast := newRowSet(newTileRows(r, c.hd, c.window, c.sigma), firstLanes(c.rows), c.hd)
			twin := &TileRowSet{Q: append([]float32(nil), fast.Q...), O: append([]float32(nil), fast.O...),
				Pos: fast.Pos, Lo: fast.Lo, M: fast.M, L: fast.L, N: fast.N}
			for step := range 2 * RowTiles {
				ktT, _, vt, cpos := randTiles(r, c.hd, c.sigma, -1)
				tiles := 1 + step%RowTiles
				v := rowTileV(r, vt, c.hd, c.f16)
				AttnRowStep(fast, c.hd, ktT, v, cpos[:tiles*TileCells], c.softcap)
				attnRowStepGo(twin, c.hd, ktT, v, cpos[:tiles*TileCells], c.softcap)
				sameBits(t, fmt.Sprintf("step %d M", step), fast.M[:c.rows], twin.M[:c.rows])
				sameBits(t, fmt.Sprintf("step %d L", step), fast.L[:c.rows], twin.L[:c.rows])
				sameBits(t, fmt.Sprintf("step %d O", step), fast.O[:c.rows*c.hd], twin.O[:c.rows*c.hd])
			}
		})
	}
}

// TestAttnRowStepMatchesLanes: AttnRowStep leaves each row's M, L and output with the bits
// AttnTileStep leaves its lane with, tile after tile, for 1 to RowSetRows rows taken from any
// lanes, with soft cap and window, tiles a row sees none of (window) and NaN scores (the maximum's
// fold in cell order, NaN included, is the lane kernel's). On every kernel path.
func TestAttnRowStepMatchesLanes(t *testing.T) {
	cases := []struct {
		name    string
		hd      int
		softcap float32
		window  bool
		nanCell int
	}{
		{"hd=32", 32, 0, false, -1},
		{"hd=64/softcap", 64, 30, false, -1},
		{"hd=64/window", 64, 0, true, -1},
		{"hd=128/softcap/window", 128, 20, true, -1},
		{"hd=64/NaN score first", 64, 0, false, 0},
		{"hd=64/NaN score mid", 64, 0, false, 7},
		{"hd=64/NaN score last", 64, 0, false, TileCells - 1},
		{"hd=96/softcap/NaN score", 96, 20, false, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.hd), uint64(c.nanCell+2)))
			lanes := newTileRows(r, c.hd, c.window, 1)
			for rows := 1; rows <= RowSetRows; rows++ {
				l := cloneTileRows(lanes)
				idx := r.Perm(TileLanes)[:rows] // the rows are any lanes of the lane kernel
				rs := newRowSet(l, idx, c.hd)
				for step := range 3 {
					ktT, kts, vt, cpos := randTiles(r, c.hd, 1, c.nanCell)
					if c.window && step == 1 {
						for j := range cpos { // a group of tiles no row sees
							cpos[j] = 1000 + int32(j)
						}
					}
					v := rowTileV(r, vt, c.hd, c.nanCell == 3) // vt rounded to halves then, for the lane kernel too
					AttnRowStep(rs, c.hd, ktT, v, cpos, c.softcap)
					for tl := range RowTiles {
						AttnTileStep(l, c.hd, kts[tl], vt[tl*TileCells*c.hd:], cpos[tl*TileCells:][:TileCells], c.softcap)
					}
					for i, k := range idx {
						if !sameOrNaN(rs.M[i], l.M[k]) || !sameOrNaN(rs.L[i], l.L[k]) {
							t.Fatalf("%d rows, step %d, row %d: M %g L %g, lane kernel M %g L %g", rows, step, i, rs.M[i], rs.L[i], l.M[k], l.L[k])
						}
						for d := range c.hd {
							if got, want := rs.O[i*c.hd+d], l.OT[d*TileLanes+k]; !sameOrNaN(got, want) {
								t.Fatalf("%d rows, step %d, row %d, dim %d: %g (%#x), lane kernel %g (%#x)",
									rows, step, i, d, got, math.Float32bits(got), want, math.Float32bits(want))
							}
						}
					}
				}
			}
		})
	}
}

// TestAttnTileLoadsKTMatchGo: the transposing assembly loaders give the Go twins' bits (F16:
// every finite half, subnormals too).
func TestAttnTileLoadsKTMatchGo(t *testing.T) {
	if !runsAsm(opRowStep) {
		t.Skip("no tiled attention assembly on this kernel path: the Go twin would be compared with itself")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, hd := range []int{16, 32, 48, 64, 128, 256} {
		t.Run(fmt.Sprintf("hd=%d", hd), func(t *testing.T) {
			const rows, pad = 40, 5
			stride := hd + pad
			cells := randCells(r, TileCells, rows)
			got, want := make([]float32, hd*rowKTLD), make([]float32, hd*rowKTLD)
			f16 := randF16s(r, rows*stride)
			AttnTileLoadKTF16(got[TileCells:], f16, cells, stride, hd)
			attnTileLoadKTF16Go(want[TileCells:], f16, cells, stride, hd)
			sameBits(t, "F16", got, want)
			f32 := randF32s(r, rows*stride)
			AttnTileLoadKTF32(got[TileCells:], f32, cells, stride, hd)
			attnTileLoadKTF32Go(want[TileCells:], f32, cells, stride, hd)
			sameBits(t, "F32", got, want)
			if hd%32 != 0 {
				return
			}
			q8, strideB := randQ8Rows(t, r, rows, hd, pad)
			AttnTileLoadKTQ8(got[2*TileCells:], q8, cells, strideB, hd)
			attnTileLoadKTQ8Go(want[2*TileCells:], q8, cells, strideB, hd)
			sameBits(t, "Q8_0", got, want)
		})
	}
}

// TestAttnTiledRowKernelMatchesLanes: AttnTiled with the row kernel writes the bits of AttnTiled
// with the lane kernel, over F16, F32 and Q8_0 caches, for blocks of 1 to 16 rows (tokens ×
// heads), with and without soft cap and sliding window, cells in table order (whole tiles no
// token sees) or shuffled, and padding cells. On every kernel path.
func TestAttnTiledRowKernelMatchesLanes(t *testing.T) {
	shapes := []struct{ n, heads int }{{1, 1}, {1, 2}, {1, 3}, {1, 4}, {1, 5}, {1, 8}, {2, 3}, {7, 1}, {1, 12}, {3, 5}, {4, 4}, {16, 1}}
	opts := []struct {
		softcap float32
		window  int32
	}{{0, 0}, {30, 0}, {0, 9}, {20, 40}}
	type tc struct {
		name         string
		kvType       string
		hd, n, heads int
		softcap      float32
		window       int32
		shuffled     bool
	}
	var cases []tc
	for _, kvType := range []string{"f16", "f32", "q8_0"} {
		for _, hd := range []int{32, 64, 128} {
			for _, sh := range shapes {
				for _, o := range opts {
					for _, shuffled := range []bool{false, true} {
						cases = append(cases, tc{fmt.Sprintf("%s/hd=%d/tokens=%d/heads=%d/softcap=%g/window=%d/shuffled=%v",
							kvType, hd, sh.n, sh.heads, o.softcap, o.window, shuffled), kvType, hd, sh.n, sh.heads, o.softcap, o.window, shuffled})
					}
				}
			}
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const rows = 150
			r := rand.New(rand.NewPCG(uint64(c.hd*c.n), uint64(c.heads)+uint64(c.window)))
			src, _, _, _ := newTiledSource(t, r, c.kvType, c.hd, rows)
			order := firstLanes(rows)
			if c.shuffled {
				order = r.Perm(rows)
			}
			blk := &TileBlock{}
			for _, cell := range order {
				blk.Cells, blk.CPos = append(blk.Cells, int32(cell)), append(blk.CPos, int32(cell))
			}
			for len(blk.Cells)%TileCells != 0 {
				blk.Cells, blk.CPos = append(blk.Cells, 0), append(blk.CPos, math.MaxInt32)
			}
			for i := range c.n {
				p, lo := int32(rows-c.n+i-r.IntN(3)), int32(math.MinInt32)
				if c.window > 0 {
					lo = p - c.window
				}
				blk.Pos, blk.Lo = append(blk.Pos, p), append(blk.Lo, lo)
			}
			q := randNormal(r, c.n*c.heads*c.hd)
			for i := range q {
				q[i] *= 2
			}
			scale := float32(1 / math.Sqrt(float64(c.hd)))
			got, want := make([]float32, c.n*c.heads*c.hd), make([]float32, c.n*c.heads*c.hd)
			s := NewTileScratch(c.heads, c.hd)
			attnTiledWith(true, s, src, blk, q, c.heads*c.hd, c.heads, scale, c.softcap, got, c.heads*c.hd)
			attnTiledWith(false, s, src, blk, q, c.heads*c.hd, c.heads, scale, c.softcap, want, c.heads*c.hd)
			sameBits(t, "row kernel out", got, want)
		})
	}
}

// BenchmarkAttnTiledDecode: one decode token's heads of one KV group (3 and 8, hd 64) over 2048
// cells of an F16 and a Q8_0 cache, with the lane kernel and the row kernel (and, F16, the exact
// kernels).
func BenchmarkAttnTiledDecode(b *testing.B) {
	const hd, cells = 64, 2048
	for _, kvType := range []string{"f16", "q8_0"} {
		r := rand.New(rand.NewPCG(1, 1))
		src, _, _, _ := newTiledSource(&testing.T{}, r, kvType, hd, cells)
		blk := &TileBlock{Pos: []int32{cells - 1}, Lo: []int32{math.MinInt32}}
		for c := range cells {
			blk.Cells, blk.CPos = append(blk.Cells, int32(c)), append(blk.CPos, int32(c))
		}
		for _, heads := range []int{3, 8} {
			q := randNormal(r, heads*hd)
			out := make([]float32, heads*hd)
			s := NewTileScratch(heads, hd)
			kernels := []string{"lanes", "rows"}
			ct, f16 := src.(*CacheTiles[uint16])
			if f16 {
				kernels = append(kernels, "exact") // the exact kernels', for the same token
			}
			scores := make([]float32, heads*cells)
			for _, kernel := range kernels {
				b.Run(fmt.Sprintf("%s/heads=%d/%s", kvType, heads, kernel), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if kernel != "exact" {
							attnTiledWith(kernel == "rows", s, src, blk, q, heads*hd, heads, 0.125, 0, out, heads*hd)
							continue
						}
						AttnScoresF16(q, heads, hd, ct.K, blk.Cells, ct.Stride, 0.125, scores)
						for h := range heads {
							SoftmaxInPlace(scores[h*cells : (h+1)*cells])
						}
						AttnValuesF16(scores, heads, hd, ct.V, blk.Cells, ct.Stride, out)
					}
				})
			}
		}
	}
}

// BenchmarkAttnTiledPrompt times AttnTiled for a block of 16 prompt tokens × 3 heads of one KV
// group (hd 64, F16 cache) at the end of 256 cells: the lane kernel with the transposes of the
// queries in and the outputs out, a prompt's attention at shallow depth.
func BenchmarkAttnTiledPrompt(b *testing.B) {
	const hd, cells, n, heads = 64, 256, 16, 3
	r := rand.New(rand.NewPCG(2, 2))
	src, _, _, _ := newTiledSource(&testing.T{}, r, "f16", hd, cells)
	blk := &TileBlock{}
	for c := range cells {
		blk.Cells, blk.CPos = append(blk.Cells, int32(c)), append(blk.CPos, int32(c))
	}
	for t := range n {
		blk.Pos, blk.Lo = append(blk.Pos, int32(cells-n+t)), append(blk.Lo, math.MinInt32)
	}
	q := randNormal(r, n*heads*hd)
	out := make([]float32, n*heads*hd)
	s := NewTileScratch(heads, hd)
	b.ReportAllocs()
	for b.Loop() {
		AttnTiled(s, src, blk, q, heads*hd, heads, 0.125, 0, out, heads*hd)
	}
}
