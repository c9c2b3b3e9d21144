package ops

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"ubatch/quant"
)

// TestFma32 compares fma32 with a·b+c computed exactly (big.Float) and rounded once to float32,
// on random operands and on sums that land next to a float32 halfway point, where rounding the
// float64 sum to nearest would round twice.
func TestFma32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	exact := func(a, b, c float32) float32 {
		x := new(big.Float).SetPrec(300).SetFloat64(float64(a))
		x.Mul(x, new(big.Float).SetPrec(300).SetFloat64(float64(b)))
		x.Add(x, new(big.Float).SetPrec(300).SetFloat64(float64(c)))
		f, _ := x.Float32()
		return f
	}
	cases := []struct {
		name    string
		a, b, c float32
	}{
		{"zero", 0, 5, 0},
		{"exact", 1.5, 2, 0.25},
		// 1 + 2^-24 + 2^-60: the float64 sum rounds to the halfway point 1+2^-24, which then rounds
		// to even (1); the exact value is just above it and rounds up.
		{"halfway from above", 1 + 1.0/(1<<12), 1.0 / (1 << 12) * (1 + 1.0/(1<<23)), 1},
		{"negative halfway", -(1 + 1.0/(1<<12)), 1.0 / (1 << 12) * (1 + 1.0/(1<<23)), -1},
		{"cancel", 3, 1.0 / 3, -1},
	}
	for i := range 20000 {
		a, b := float32(r.NormFloat64()), float32(r.NormFloat64()*math.Exp2(float64(r.IntN(60)-30)))
		c := float32(r.NormFloat64() * math.Exp2(float64(r.IntN(60)-30)))
		cases = append(cases, struct {
			name    string
			a, b, c float32
		}{fmt.Sprintf("random %d", i), a, b, c})
	}
	for _, tc := range cases {
		if got, want := fma32(tc.a, tc.b, tc.c), exact(tc.a, tc.b, tc.c); got != want {
			t.Errorf("%s: fma32(%g, %g, %g) = %g, want %g", tc.name, tc.a, tc.b, tc.c, got, want)
		}
	}
}

// TestExpTile: the tile kernel's exponential is within 3e-7 of e^x on [-60, 0] and 0 below -60,
// at -Inf and at NaN.
func TestExpTile(t *testing.T) {
	for i := 0; i <= 600000; i++ {
		x := -float32(i) / 10000
		want := math.Exp(float64(x))
		if got := float64(expTile(x)); math.Abs(got-want) > 3e-7*want {
			t.Fatalf("expTile(%g) = %g, want %g", x, got, want)
		}
	}
	for _, x := range []float32{-60.001, -1000, float32(math.Inf(-1)), float32(math.NaN())} {
		if got := expTile(x); got != 0 {
			t.Errorf("expTile(%g) = %g, want 0", x, got)
		}
	}
}

// newTileRows makes a tile's rows with random queries, positions in [0, 64) (windows of 7 when
// window), and a running state as after earlier tiles: outputs, maxima and sums of their scale.
func newTileRows(r *rand.Rand, hd int, window bool, sigma float64) *TileRows {
	rows := &TileRows{QT: make([]float32, hd*TileLanes), OT: make([]float32, hd*TileLanes)}
	for i := range rows.QT {
		rows.QT[i] = float32(r.NormFloat64() * sigma)
		rows.OT[i] = float32(r.NormFloat64())
	}
	for i := range TileLanes {
		rows.Pos[i], rows.Lo[i] = int32(r.IntN(64)), math.MinInt32
		if window {
			rows.Lo[i] = rows.Pos[i] - 7
		}
		rows.M[i], rows.L[i] = TileMaxInit, 0
		if r.IntN(2) == 0 {
			rows.M[i], rows.L[i] = float32(r.NormFloat64()*sigma*sigma), float32(r.Float64()*10)
		}
	}
	rows.Pos[TileLanes-1] = math.MinInt32 // a lane without a token
	return rows
}

func cloneTileRows(r *TileRows) *TileRows {
	c := *r
	c.QT, c.OT = append([]float32(nil), r.QT...), append([]float32(nil), r.OT...)
	return &c
}

// TestAttnTileAsmMatchesGo: the AVX-512 tile kernel and its Go twin agree to the bit, over
// several successive tiles, with and without soft cap and window, for scores small and large
// (large ones take the exponentials below their cutoff).
func TestAttnTileAsmMatchesGo(t *testing.T) {
	if !runsAsm(opTileStep) {
		t.Skip("no tiled attention assembly on this kernel path: the Go twin would be compared with itself")
	}
	for _, hd := range []int{8, 16, 24, 64, 128, 136, 256} {
		for _, softcap := range []float32{0, 20} {
			for _, window := range []bool{false, true} {
				for _, sigma := range []float64{0.3, 3} {
					name := fmt.Sprintf("hd=%d/softcap=%g/window=%v/sigma=%g", hd, softcap, window, sigma)
					t.Run(name, func(t *testing.T) {
						r := rand.New(rand.NewPCG(uint64(hd), uint64(softcap)+uint64(sigma*10)))
						fast := newTileRows(r, hd, window, sigma)
						twin := cloneTileRows(fast)
						for step := range 4 {
							kt, vt := make([]float32, TileCells*hd), make([]float32, TileCells*hd)
							for i := range kt {
								kt[i], vt[i] = float32(r.NormFloat64()*sigma), float32(r.NormFloat64())
							}
							cpos := make([]int32, TileCells)
							for j := range cpos {
								cpos[j] = int32(r.IntN(64))
							}
							cpos[r.IntN(TileCells)] = math.MaxInt32
							AttnTileStep(fast, hd, kt, vt, cpos, softcap)
							attnTileStepGo(twin, hd, kt, vt, cpos, softcap)
							sameBits(t, fmt.Sprintf("step %d M", step), fast.M[:], twin.M[:])
							sameBits(t, fmt.Sprintf("step %d L", step), fast.L[:], twin.L[:])
							sameBits(t, fmt.Sprintf("step %d OT", step), fast.OT, twin.OT)
						}
					})
				}
			}
		}
	}
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %g (%#x), Go twin %g (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestAttnTileLoadsMatchGo: the assembly row loaders widen F16 (every finite half, subnormals
// too) and Q8_0 rows to the Go twins' bits.
func TestAttnTileLoadsMatchGo(t *testing.T) {
	if !runsAsm(opTileStep) {
		t.Skip("no tiled attention assembly on this kernel path: the Go twin would be compared with itself")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, hd := range []int{8, 32, 40, 64, 96, 128, 256} {
		t.Run(fmt.Sprintf("hd=%d", hd), func(t *testing.T) {
			const rows, pad = 40, 5
			stride := hd + pad
			cells := randCells(r, TileCells, rows)
			f16 := randF16s(r, rows*stride)
			got, want := make([]float32, TileCells*hd), make([]float32, TileCells*hd)
			AttnTileLoadF16(got, f16, cells, stride, hd)
			attnTileLoadF16Go(want, f16, cells, stride, hd)
			sameBits(t, "F16", got, want)
			if hd%32 != 0 {
				return
			}
			q8, strideB := randQ8Rows(t, r, rows, hd, pad)
			AttnTileLoadQ8(got, q8, cells, strideB, hd)
			attnTileLoadQ8Go(want, q8, cells, strideB, hd)
			sameBits(t, "Q8_0", got, want)
		})
	}
}

// attnTiledTol bounds the tiled attention's difference from the exact one (float64 here), per
// output element, relative to the largest |v| the token sees: the scores are summed in another
// order and scaled before rather than after, the exponential is a polynomial (3e-7), and the
// output is rescaled once per tile. Measured differences here are below 1e-6.
const attnTiledTol = 1e-5

// TestAttnTiledNearExact compares AttnTiled over F16, F32 and Q8_0 caches with the attention
// computed exactly (float64 scores, soft cap, softmax and sums over the same widened rows), for
// blocks of 1 to 16 tokens, with and without soft cap and sliding window, on every kernel path
// (the Go twin where there is no assembly).
func TestAttnTiledNearExact(t *testing.T) {
	for _, kvType := range []string{"f16", "f32", "q8_0"} {
		for _, hd := range []int{32, 64, 128} {
			for _, n := range []int{1, 5, 16} {
				for _, opt := range []struct {
					softcap float32
					window  int32
					sinks   bool
				}{{0, 0, false}, {30, 0, false}, {0, 9, false}, {0, 0, true}, {0, 9, true}} {
					name := fmt.Sprintf("%s/hd=%d/tokens=%d/softcap=%g/window=%d/sinks=%v", kvType, hd, n, opt.softcap, opt.window, opt.sinks)
					t.Run(name, func(t *testing.T) {
						checkTiled(t, kvType, hd, n, opt.softcap, opt.window, opt.sinks)
					})
				}
			}
		}
	}
}

// checkTiled compares AttnTiled with a float64 softmax over the cells each token sees, with a
// sink logit per head in the denominator when sinks.
func checkTiled(t *testing.T, kvType string, hd, n int, softcap float32, window int32, sinks bool) {
	const heads, rows = 3, 70
	r := rand.New(rand.NewPCG(uint64(hd*n), uint64(window)))
	src, kf, vf, stride := newTiledSource(t, r, kvType, hd, rows)
	// Cells in a shuffled order at positions 0..rows-1; tokens at the last n positions.
	perm := r.Perm(rows)
	blk := &TileBlock{}
	for _, c := range perm {
		blk.Cells, blk.CPos = append(blk.Cells, int32(c)), append(blk.CPos, int32(c))
	}
	for len(blk.Cells)%TileCells != 0 {
		blk.Cells, blk.CPos = append(blk.Cells, 0), append(blk.CPos, math.MaxInt32)
	}
	for i := range n {
		p := int32(rows - n + i)
		lo := int32(math.MinInt32)
		if window > 0 {
			lo = p - window
		}
		blk.Pos, blk.Lo = append(blk.Pos, p), append(blk.Lo, lo)
	}
	q := randNormal(r, n*heads*hd)
	for i := range q {
		q[i] *= 2 // scores of a few units: softmax weights far from uniform
	}
	if sinks {
		// Sinks of the scores' size: each takes a large but not overwhelming share.
		blk.Sinks = randNormal(r, heads)
		for i := range blk.Sinks {
			blk.Sinks[i] = 2*blk.Sinks[i] + 1
		}
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	out := make([]float32, n*heads*hd)
	AttnTiled(NewTileScratch(heads, hd), src, blk, q, heads*hd, heads, scale, softcap, out, heads*hd)
	for tk := range n {
		for h := range heads {
			qh := q[tk*heads*hd+h*hd:][:hd]
			var cells []int
			for c := range rows {
				if int32(c) <= blk.Pos[tk] && int32(c) > blk.Lo[tk] {
					cells = append(cells, c)
				}
			}
			s := make([]float64, len(cells))
			mx := math.Inf(-1)
			for j, c := range cells {
				for d, x := range qh {
					s[j] += float64(x) * float64(kf[c*stride+d])
				}
				s[j] *= float64(scale)
				if softcap > 0 {
					s[j] = float64(softcap) * math.Tanh(s[j]/float64(softcap))
				}
				mx = max(mx, s[j])
			}
			var sum, vmax float64
			if sinks {
				mx = max(mx, float64(blk.Sinks[h]))
				sum = math.Exp(float64(blk.Sinks[h]) - mx)
			}
			for j, c := range cells {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
				for d := range hd {
					vmax = max(vmax, math.Abs(float64(vf[c*stride+d])))
				}
			}
			for d := range hd {
				var want float64
				for j, c := range cells {
					want += s[j] / sum * float64(vf[c*stride+d])
				}
				got := float64(out[tk*heads*hd+h*hd+d])
				if diff := math.Abs(got - want); diff > attnTiledTol*vmax || math.IsNaN(got) {
					t.Fatalf("token %d head %d dim %d: %g, exact %g (difference %.2g of max |v| %g)", tk, h, d, got, want, diff/vmax, vmax)
				}
			}
		}
	}
}

// newTiledSource makes a cache of rows random K and V rows of hd dimensions (stride floats or
// blocks apart) of kvType ("f16", "f32" or "q8_0"), and the rows as the tiles widen them (kf, vf:
// row c at [c*stride:]).
func newTiledSource(t *testing.T, r *rand.Rand, kvType string, hd, rows int) (src TileSource, kf, vf []float32, stride int) {
	const pad = 3
	stride = hd + pad
	kf, vf = make([]float32, rows*stride), make([]float32, rows*stride)
	switch kvType {
	case "f16":
		k, v := randF16Normal(r, rows*stride), randF16Normal(r, rows*stride)
		src = &CacheTiles[uint16]{K: k, V: v, Stride: stride, HD: hd}
		for i := range k {
			kf[i], vf[i] = quant.F16ToF32(k[i]), quant.F16ToF32(v[i])
		}
	case "f32":
		for i := range kf {
			kf[i], vf[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		src = &CacheTiles[float32]{K: kf, V: vf, Stride: stride, HD: hd}
	case "q8_0":
		strideB := hd/32*q8Block + pad
		k, v := make([]byte, rows*strideB), make([]byte, rows*strideB)
		for c := range rows {
			for _, x := range [][]byte{k, v} {
				if err := quant.Quantize(quant.Q8_0, randNormal(r, hd), x[c*strideB:][:hd/32*q8Block]); err != nil {
					t.Fatal(err)
				}
			}
		}
		src = &CacheTiles[byte]{K: k, V: v, Stride: strideB, HD: hd}
		tmp := make([]float32, TileCells*hd)
		for c := range rows {
			cells := make([]int32, TileCells)
			for j := range cells {
				cells[j] = int32(c)
			}
			attnTileLoadQ8Go(tmp, k, cells, strideB, hd)
			copy(kf[c*stride:][:hd], tmp)
			attnTileLoadQ8Go(tmp, v, cells, strideB, hd)
			copy(vf[c*stride:][:hd], tmp)
		}
	}
	return src, kf, vf, stride
}

func randNormal(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func randF16Normal(r *rand.Rand, n int) []uint16 {
	h := make([]uint16, n)
	for i := range h {
		h[i] = quant.F32ToF16(float32(r.NormFloat64()))
	}
	return h
}

// TestAttnTiledRowsIndependent checks that a token's tiled attention has the same bits whatever
// block it comes in and whichever kernel the block takes: alone (a decode step: all heads in one
// set; the row kernel), in blocks of 2 (6 rows, the row kernel) or of 5 (rows of several tokens
// and heads sharing sets; the lane kernel), each also with the other kernel forced, against
// blocks of 16 (one set per head, the lane kernel).
func TestAttnTiledRowsIndependent(t *testing.T) {
	const heads, hd, rows, n = 3, 64, 50, 16
	r := rand.New(rand.NewPCG(7, 11))
	k, v := randF16Normal(r, rows*hd), randF16Normal(r, rows*hd)
	src := &CacheTiles[uint16]{K: k, V: v, Stride: hd, HD: hd}
	var cells, cpos []int32
	for c := range rows {
		cells, cpos = append(cells, int32(c)), append(cpos, int32(c))
	}
	for len(cells)%TileCells != 0 {
		cells, cpos = append(cells, 0), append(cpos, math.MaxInt32)
	}
	pos, lo := make([]int32, n), make([]int32, n)
	for i := range n {
		pos[i], lo[i] = int32(rows-n+i), math.MinInt32
	}
	q := randNormal(r, n*heads*hd)
	scale := float32(1 / math.Sqrt(float64(hd)))
	// attend runs the blocks of size tokens with kernel "auto" (AttnTiled's choice), "rows" or
	// "lanes".
	attend := func(size int, kernel string) []float32 {
		out := make([]float32, n*heads*hd)
		s := NewTileScratch(heads, hd)
		for t0 := 0; t0 < n; t0 += size {
			t1 := min(t0+size, n)
			blk := &TileBlock{Pos: pos[t0:t1], Lo: lo[t0:t1], Cells: cells, CPos: cpos}
			qb, ob := q[t0*heads*hd:], out[t0*heads*hd:]
			if kernel == "auto" {
				AttnTiled(s, src, blk, qb, heads*hd, heads, scale, 0, ob, heads*hd)
			} else {
				attnTiledWith(kernel == "rows", s, src, blk, qb, heads*hd, heads, scale, 0, ob, heads*hd)
			}
		}
		return out
	}
	if useRows(n*heads, hd) || !useRows(heads, hd) || !useRows(2*heads, hd) || useRows(5*heads, hd) {
		t.Fatal("the cases no longer take the kernels their names say")
	}
	want := attend(n, "auto")
	for _, tc := range []struct {
		name   string
		size   int
		kernel string
	}{
		{"alone (row kernel)", 1, "auto"}, {"alone, lane kernel", 1, "lanes"},
		{"blocks of 2 (row kernel)", 2, "auto"}, {"blocks of 2, lane kernel", 2, "lanes"},
		{"blocks of 5 (lane kernel)", 5, "auto"}, {"blocks of 5, row kernel", 5, "rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := attend(tc.size, tc.kernel)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("element %d (token %d, head %d): %v, in a block of 16 %v", i, i/(heads*hd), i/hd%heads, got[i], want[i])
				}
			}
		})
	}
}

// randQ8Rows returns rows Q8_0 rows of hd uniform values (hd a multiple of 32), pad bytes apart
// beyond their blocks, and their stride in bytes.
func randQ8Rows(t *testing.T, r *rand.Rand, rows, hd, pad int) ([]byte, int) {
	t.Helper()
	strideB := hd/32*q8Block + pad
	q8 := make([]byte, rows*strideB)
	for c := range rows {
		if err := quant.Quantize(quant.Q8_0, randF32s(r, hd), q8[c*strideB:][:hd/32*q8Block]); err != nil {
			t.Fatal(err)
		}
	}
	return q8, strideB
}
