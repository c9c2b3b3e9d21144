package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// Tests of the 8-row Q4_0/Q8_0 tiles (q4RepackAVX2, q8RepackAVX2, q4TileAVX2, q8TileAVX2) that
// MatMul uses for several tokens.
// The repack must match its Go twin byte for byte; the tile products must match the Go twin and
// the single-row Go kernel within the kernels' tolerance (asmRelTol·Σ|terms|).

var tileTypes = []Type{Q4_0, Q8_0}

// tileRowsFixture returns 8 random rows of typ of nb blocks, rowStride bytes apart.
func tileRowsFixture(t testing.TB, r *rand.Rand, typ Type, nb, rowStride int) []byte {
	w := make([]byte, 7*rowStride+typ.RowSize(nb*32))
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for row := 0; row < tileRows; row++ {
		copy(w[row*rowStride:], randWeights(t, r, typ, nb*32))
	}
	return w
}

// repackAsm runs the assembly repack for typ into a 64-byte aligned tile.
func repackAsm(typ Type, nb int, w []byte, rowStride int) []byte {
	bb, _ := tileBlock(typ)
	buf := make([]byte, nb*bb+64)
	tile := buf[tileAlign(&buf[0]):]
	if typ == Q8_0 {
		q8RepackAVX2(nb, &w[0], rowStride, &tile[0])
	} else {
		q4RepackAVX2(nb, &w[0], rowStride, &tile[0])
	}
	return tile[:nb*bb]
}

// tileAsm runs the assembly tile product (for Q4_0 with the activation sums of q4SumsAVX2, which
// it checks against q4SumsGo).
func tileAsm(t testing.TB, typ Type, nb int, tile, x []byte, xStride, nx int, out []float32, outStride int) {
	if typ == Q8_0 {
		q8TileAVX2(nb, &tile[0], &x[0], xStride, nx, &out[0], outStride)
		return
	}
	sums, want := make([]int32, 4*nb), make([]int32, 4*nb)
	q4SumsAVX2(nb, &x[0], xStride, nx, &sums[0])
	q4SumsGo(nb, x, xStride, nx, want)
	for i := range sums {
		if i%4 < nx && sums[i] != want[i] {
			t.Fatalf("activation sum %d (block %d column %d) = %d, Go twin %d", i, i/4, i%4, sums[i], want[i])
		}
	}
	q4TileAVX2(nb, &tile[0], &x[0], xStride, nx, &out[0], outStride, &sums[0])
}

func repackBoth(t testing.TB, typ Type, nb int, w []byte, rowStride int) []byte {
	t.Helper()
	got := repackAsm(typ, nb, w, rowStride)
	bb, _ := tileBlock(typ)
	want := make([]byte, nb*bb)
	tileRepackGo(typ, nb, w, rowStride, want)
	for i := range got {
		if got[i] != want[i] {
			b, o := i/bb, i%bb
			t.Fatalf("%v nb=%d: repacked byte %d (block %d offset %d) = %#x, Go twin %#x", typ, nb, i, b, o, got[i], want[i])
		}
	}
	return got
}

// checkTile runs the assembly tile product and compares it with tileProductGo and with the Go
// single-row kernel on each row.
func checkTile(t testing.TB, typ Type, nb int, w []byte, rowStride int, tile, x []byte, xStride, nx, outStride int) {
	t.Helper()
	const sentinel = float32(-3.5)
	n := (nx-1)*outStride + tileRows + 1
	got, want := make([]float32, n), make([]float32, n)
	for i := range got {
		got[i], want[i] = sentinel, sentinel
	}
	tileAsm(t, typ, nb, tile, x, xStride, nx, got, outStride)
	tileProductGo(typ, nb, tile, x, xStride, nx, want, outStride)
	k := nb * 32
	for i := range got {
		j, r := i/outStride, i%outStride
		if j >= nx || r >= tileRows {
			if got[i] != sentinel {
				t.Fatalf("out[%d] outside the tile was written", i)
			}
			continue
		}
		row := w[r*rowStride : r*rowStride+typ.RowSize(k)]
		xj := x[j*xStride : j*xStride+nb*q8_0Bytes]
		mag := absDot(t, typ, k, row, xj)
		if math.IsInf(mag, 0) || mag > 1e36 {
			continue
		}
		var single [1]float32
		DotGo(typ)(k, row, xj, 0, 1, single[:])
		for _, ref := range []struct {
			name string
			v    float32
		}{{"Go tile", want[i]}, {"Go kernel", single[0]}} {
			if d := math.Abs(float64(got[i]) - float64(ref.v)); !(d <= asmRelTol*mag+asmAbsTol) {
				t.Fatalf("%v nb=%d nx=%d row %d column %d: tile %v, %s %v (|diff| %.3g, Σ|terms| %.3g)",
					typ, nb, nx, r, j, got[i], ref.name, ref.v, d, mag)
			}
		}
	}
}

func TestTileMatchesGo(t *testing.T) {
	for _, typ := range tileTypes {
		requireAsm(t, typ)
		r := rand.New(rand.NewPCG(11, uint64(typ)))
		bb, _ := tileBlock(typ)
		for _, nb := range []int{1, 2, 3, 7, 64, 176, tileMaxBytes / bb} {
			rowStride := typ.RowSize(nb*32) + r.IntN(3)*typ.TypeSize()
			w := tileRowsFixture(t, r, typ, nb, rowStride)
			tile := repackBoth(t, typ, nb, w, rowStride)
			for nx := 1; nx <= MaxCols; nx++ {
				xStride := nb*q8_0Bytes + r.IntN(40)
				x := randActs(r, typ, nb*32, nx, xStride)
				for _, outStride := range []int{tileRows, tileRows + 5, 64} {
					checkTile(t, typ, nb, w, rowStride, tile, x, xStride, nx, outStride)
				}
			}
		}
	}
}

// TestMatMulTiledDispatch checks which DotFuncs MatMul replaces by tiles: only the assembly Q4_0
// and Q8_0 kernels that Kernel hands out.
func TestMatMulTiledDispatch(t *testing.T) {
	for _, typ := range tileTypes {
		asm := requireAsm(t, typ)
		if funcPC(Kernel(typ)) != funcPC(asm) {
			t.Fatalf("%v: Kernel is not the registered assembly kernel", typ)
		}
		f := newMatmulFixture(t, typ, 256, 16, 8)
		out := make([]float32, 8*16)
		for _, c := range []struct {
			name  string
			dot   DotFunc
			nTok  int
			tiled bool
		}{
			{"asm", asm, 8, true},
			{"asm few tokens", asm, tileMinTokens(typ) - 1, false},
			{"go", DotGo(typ), 8, false},
			{"wrapped asm", func(k int, w, x []byte, s, nx int, o []float32) { asm(k, w, x, s, nx, o) }, 8, false},
		} {
			if got := matmulTiled(c.dot, typ, 256, f.w, f.xq, c.nTok, out, 16, 0, 16) == 16; got != c.tiled {
				t.Errorf("%v %s: tiled %v, want %v", typ, c.name, got, c.tiled)
			}
		}
		if r := matmulTiled(asm, typ, 256, f.w, f.xq, 8, out, 16, 3, 16); r != 11 {
			t.Errorf("%v rows [3, 16): tiles end at %d, want 11", typ, r)
		}
	}
	f := newMatmulFixture(t, F16, 256, 16, 8)
	if r := matmulTiled(asmKernels[F16], F16, 256, f.w, f.xq, 8, make([]float32, 8*16), 16, 0, 16); r != 0 {
		t.Errorf("F16 was tiled")
	}
	if r := matmulTiled(asmQ4_0, Q8_0, 256, f.w, f.xq, 8, make([]float32, 8*16), 16, 0, 16); r != 0 {
		t.Errorf("Q8_0 weights with the Q4_0 kernel were tiled")
	}
}

// TestMatMulTiledChunks runs small and large tiles (stack buffers), with more tokens than fit in
// one chunk of activation sums, against the Go kernels.
func TestMatMulTiledChunks(t *testing.T) {
	for _, c := range []struct {
		typ        Type
		nb, nTok   int
		small      bool
		wantChunks int
	}{
		{Q4_0, tileMaxBytes / tileBlock4, 45, false, 2},
		{Q4_0, 64, 70, true, 2},
		{Q8_0, 64, 70, true, 2},
		{Q8_0, 200, 9, false, 1},
	} {
		dot := requireAsm(t, c.typ)
		bb, _ := tileBlock(c.typ)
		sumsLen := tileSumsLen
		if c.small {
			sumsLen /= 4
		}
		chunk := sumsLen / (MaxCols * c.nb) * MaxCols
		if small := c.nb*bb <= tileSmallBytes; small != c.small || (c.nTok+chunk-1)/chunk != c.wantChunks {
			t.Fatalf("%v nb=%d: small tile %v, %d chunks of %d tokens: not the case meant", c.typ, c.nb, small, (c.nTok+chunk-1)/chunk, chunk)
		}
		k, nRows := 32*c.nb, 16
		f := newMatmulFixture(t, c.typ, k, nRows, c.nTok)
		out := make([]float32, c.nTok*nRows)
		MatMul(dot, c.typ, k, f.w, f.xq, c.nTok, out, nRows, 0, nRows)
		for tok := 0; tok < c.nTok; tok++ {
			for r := 0; r < nRows; r++ {
				row, x := f.w[r*f.rowBytes:(r+1)*f.rowBytes], f.xq[tok*f.xRow:(tok+1)*f.xRow]
				want := Dot(c.typ, k, row, x)
				mag := absDot(t, c.typ, k, row, x)
				if d := math.Abs(float64(out[tok*nRows+r]) - float64(want)); d > asmRelTol*mag+asmAbsTol {
					t.Fatalf("%v nb=%d tok %d row %d: %v, want %v (|diff| %.3g, Σ|terms| %.3g)",
						c.typ, c.nb, tok, r, out[tok*nRows+r], want, d, mag)
				}
			}
		}
	}
}

func TestMatMulTiledNoAlloc(t *testing.T) {
	for _, typ := range tileTypes {
		dot := requireAsm(t, typ)
		for _, k := range []int{2048, 5632} { // small and large tiles
			f := newMatmulFixture(t, typ, k, 24, 9)
			out := make([]float32, 9*24)
			if n := testing.AllocsPerRun(10, func() { MatMul(dot, typ, k, f.w, f.xq, 9, out, 24, 0, 24) }); n != 0 {
				t.Errorf("%v k=%d: tiled MatMul allocates %v times per call", typ, k, n)
			}
		}
	}
}

// fuzzTile repacks 8 rows of typ made of arbitrary bytes (scales made finite, activation quants in
// [-127, 127]) with the assembly and the Go twin and compares the tile products.
func fuzzTile(f *testing.F, typ Type) {
	r := rand.New(rand.NewPCG(13, uint64(typ)))
	for _, nb := range []int{1, 3, 9} {
		w := tileRowsFixture(f, r, typ, nb, typ.RowSize(nb*32))
		x := randActs(r, typ, nb*32, MaxCols, nb*q8_0Bytes)
		f.Add(append(w, x...), uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, nxb uint8) {
		if !hasAVX2 {
			t.Skip("no AVX2")
		}
		nx := 1 + int(nxb)%MaxCols
		bb, _ := tileBlock(typ)
		nb := min(len(data)/(tileRows*typ.TypeSize()+nx*q8_0Bytes), tileMaxBytes/bb)
		if nb == 0 {
			return
		}
		rowBytes, xRow := typ.RowSize(nb*32), nb*q8_0Bytes
		w := append([]byte(nil), data[:tileRows*rowBytes]...)
		x := append([]byte(nil), data[tileRows*rowBytes:tileRows*rowBytes+nx*xRow]...)
		sanitizeWeights(typ, w)
		sanitizeActs(typ, x)
		tile := repackBoth(t, typ, nb, w, rowBytes)
		checkTile(t, typ, nb, w, rowBytes, tile, x, xRow, nx, tileRows+1)
	})
}

func FuzzTileQ4_0(f *testing.F) { fuzzTile(f, Q4_0) }

func FuzzTileQ8_0(f *testing.F) { fuzzTile(f, Q8_0) }

// BenchmarkTile measures the repack and the tile product (8 rows x 4 columns) at k=2048 and
// 5632; GFLOP/s counts 2·8·4·k per tile product, GB/s the 8 rows' weight bytes.
func BenchmarkTile(b *testing.B) {
	for _, typ := range tileTypes {
		r := rand.New(rand.NewPCG(15, 16))
		for _, k := range []int{2048, 5632} {
			nb := k / 32
			rowBytes := typ.RowSize(k)
			w := tileRowsFixture(b, r, typ, nb, rowBytes)
			x := randActs(r, typ, k, MaxCols, nb*q8_0Bytes)
			out := make([]float32, MaxCols*tileRows)
			tile := repackAsm(typ, nb, w, rowBytes)
			b.Run(fmt.Sprintf("%v/repack/k=%d", typ, k), func(b *testing.B) {
				b.SetBytes(int64(tileRows * rowBytes))
				b.ReportAllocs()
				best := time.Duration(math.MaxInt64)
				for b.Loop() {
					t0 := time.Now()
					if typ == Q8_0 {
						q8RepackAVX2(nb, &w[0], rowBytes, &tile[0])
					} else {
						q4RepackAVX2(nb, &w[0], rowBytes, &tile[0])
					}
					best = min(best, time.Since(t0))
				}
				reportBest(b, best, float64(tileRows*rowBytes), 0)
			})
			b.Run(fmt.Sprintf("%v/product/k=%d", typ, k), func(b *testing.B) {
				b.ReportAllocs()
				best := time.Duration(math.MaxInt64)
				sums := make([]int32, 4*nb)
				q4SumsGo(nb, x, nb*q8_0Bytes, MaxCols, sums)
				for b.Loop() {
					t0 := time.Now()
					if typ == Q8_0 {
						q8TileAVX2(nb, &tile[0], &x[0], nb*q8_0Bytes, MaxCols, &out[0], tileRows)
					} else {
						q4TileAVX2(nb, &tile[0], &x[0], nb*q8_0Bytes, MaxCols, &out[0], tileRows, &sums[0])
					}
					best = min(best, time.Since(t0))
				}
				flops := float64(2 * tileRows * MaxCols * k)
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				reportBest(b, best, float64(tileRows*rowBytes), flops)
			})
		}
	}
}
