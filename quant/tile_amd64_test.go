package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// Tests of the 8-row Q4_0 tiles (q4RepackAVX2, q4TileAVX2) that MatMul uses for several tokens.
// The repack must match its Go twin byte for byte; the tile products must match the Go twin and
// the single-row Go kernel within the kernels' tolerance (asmRelTol·Σ|terms|).

// tileRowsFixture returns 8 random Q4_0 rows of nb blocks, rowStride bytes apart.
func tileRowsFixture(t testing.TB, r *rand.Rand, nb, rowStride int) []byte {
	w := make([]byte, 7*rowStride+nb*q4_0Bytes)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for row := 0; row < tileRows; row++ {
		copy(w[row*rowStride:], randWeights(t, r, Q4_0, nb*32))
	}
	return w
}

func repackBoth(t testing.TB, nb int, w []byte, rowStride int) []byte {
	t.Helper()
	got := make([]byte, nb*tileBlockBytes)
	want := make([]byte, nb*tileBlockBytes)
	q4RepackAVX2(nb, &w[0], rowStride, &got[0])
	q4RepackGo(nb, w, rowStride, want)
	for i := range got {
		if got[i] != want[i] {
			b, o := i/tileBlockBytes, i%tileBlockBytes
			t.Fatalf("nb=%d: repacked byte %d (block %d offset %d) = %#x, Go twin %#x", nb, i, b, o, got[i], want[i])
		}
	}
	return got
}

// checkTile runs q4TileAVX2 and compares it with q4TileGo and with dotQ4_0Go on each row.
func checkTile(t testing.TB, nb int, w []byte, rowStride int, tile, x []byte, xStride, nx, outStride int) {
	t.Helper()
	const sentinel = float32(-3.5)
	n := (nx-1)*outStride + tileRows + 1
	got, want := make([]float32, n), make([]float32, n)
	for i := range got {
		got[i], want[i] = sentinel, sentinel
	}
	q4TileAVX2(nb, &tile[0], &x[0], xStride, nx, &got[0], outStride)
	q4TileGo(nb, tile, x, xStride, nx, want, outStride)
	k := nb * 32
	for i := range got {
		j, r := i/outStride, i%outStride
		if j >= nx || r >= tileRows {
			if got[i] != sentinel {
				t.Fatalf("out[%d] outside the tile was written", i)
			}
			continue
		}
		row := w[r*rowStride : r*rowStride+nb*q4_0Bytes]
		xj := x[j*xStride : j*xStride+nb*q8_0Bytes]
		mag := absDot(t, Q4_0, k, row, xj)
		if math.IsInf(mag, 0) || mag > 1e36 {
			continue
		}
		var single [1]float32
		dotQ4_0Go(k, row, xj, 0, 1, single[:])
		for _, ref := range []struct {
			name string
			v    float32
		}{{"Go tile", want[i]}, {"dotQ4_0Go", single[0]}} {
			if d := math.Abs(float64(got[i]) - float64(ref.v)); !(d <= asmRelTol*mag+asmAbsTol) {
				t.Fatalf("nb=%d nx=%d row %d column %d: tile %v, %s %v (|diff| %.3g, Σ|terms| %.3g)",
					nb, nx, r, j, got[i], ref.name, ref.v, d, mag)
			}
		}
	}
}

func TestQ4TileMatchesGo(t *testing.T) {
	requireAsm(t, Q4_0)
	r := rand.New(rand.NewPCG(11, 12))
	for _, nb := range []int{1, 2, 3, 7, 64, 176, tileMaxBytes / tileBlockBytes} {
		rowStride := nb*q4_0Bytes + r.IntN(3)*q4_0Bytes
		w := tileRowsFixture(t, r, nb, rowStride)
		tile := repackBoth(t, nb, w, rowStride)
		for nx := 1; nx <= MaxCols; nx++ {
			xRow := nb * q8_0Bytes
			xStride := xRow + r.IntN(40)
			x := randActs(r, Q4_0, nb*32, nx, xStride)
			for _, outStride := range []int{tileRows, tileRows + 5, 64} {
				checkTile(t, nb, w, rowStride, tile, x, xStride, nx, outStride)
			}
		}
	}
}

// TestMatMulTiledDispatch checks which DotFuncs MatMul replaces by tiles: only the assembly Q4_0
// kernel that Kernel hands out.
func TestMatMulTiledDispatch(t *testing.T) {
	asm := requireAsm(t, Q4_0)
	if funcPC(Kernel(Q4_0)) != funcPC(asmQ4_0) || funcPC(asm) != funcPC(asmQ4_0) {
		t.Fatalf("Kernel(Q4_0) is not the kernel the tiles stand in for")
	}
	f := newMatmulFixture(t, Q4_0, 256, 16, 8)
	out := make([]float32, 8*16)
	for _, c := range []struct {
		name  string
		dot   DotFunc
		nTok  int
		tiled bool
	}{
		{"asm", asm, 8, true},
		{"asm few tokens", asm, tileMinTokens - 1, false},
		{"go", DotGo(Q4_0), 8, false},
		{"wrapped asm", func(k int, w, x []byte, s, nx int, o []float32) { asm(k, w, x, s, nx, o) }, 8, false},
	} {
		if got := matmulQ4_0Tiled(c.dot, Q4_0, 256, f.w, f.xq, c.nTok, out, 16, 0, 16) == 16; got != c.tiled {
			t.Errorf("%s: tiled %v, want %v", c.name, got, c.tiled)
		}
	}
	if r := matmulQ4_0Tiled(asm, Q8_0, 256, f.w, f.xq, 8, out, 16, 0, 16); r != 0 {
		t.Errorf("Q8_0 was tiled")
	}
	if r := matmulQ4_0Tiled(asm, Q4_0, 256, f.w, f.xq, 8, out, 16, 3, 16); r != 11 {
		t.Errorf("rows [3, 16): tiles end at %d, want 11", r)
	}
}

func TestMatMulTiledNoAlloc(t *testing.T) {
	dot := requireAsm(t, Q4_0)
	f := newMatmulFixture(t, Q4_0, 2048, 24, 9)
	out := make([]float32, 9*24)
	if n := testing.AllocsPerRun(10, func() { MatMul(dot, Q4_0, 2048, f.w, f.xq, 9, out, 24, 0, 24) }); n != 0 {
		t.Errorf("tiled MatMul allocates %v times per call", n)
	}
}

// FuzzTileQ4_0 repacks 8 rows made of arbitrary bytes (scales made finite, activation quants in
// [-127, 127]) with the assembly and the Go twin and compares the tile products.
func FuzzTileQ4_0(f *testing.F) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, nb := range []int{1, 3, 9} {
		w := tileRowsFixture(f, r, nb, nb*q4_0Bytes)
		x := randActs(r, Q4_0, nb*32, MaxCols, nb*q8_0Bytes)
		f.Add(append(w, x...), uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, nxb uint8) {
		if !hasAVX2 {
			t.Skip("no AVX2")
		}
		nx := 1 + int(nxb)%MaxCols
		nb := min(len(data)/(tileRows*q4_0Bytes+nx*q8_0Bytes), tileMaxBytes/tileBlockBytes)
		if nb == 0 {
			return
		}
		rowBytes, xRow := nb*q4_0Bytes, nb*q8_0Bytes
		w := append([]byte(nil), data[:tileRows*rowBytes]...)
		x := append([]byte(nil), data[tileRows*rowBytes:tileRows*rowBytes+nx*xRow]...)
		sanitizeWeights(Q4_0, w)
		sanitizeActs(Q4_0, x)
		tile := repackBoth(t, nb, w, rowBytes)
		checkTile(t, nb, w, rowBytes, tile, x, xRow, nx, tileRows+1)
	})
}

// BenchmarkQ4Tile measures the repack and the tile product (8 rows x 4 columns) at k=2048 and
// 5632; GFLOP/s counts 2·8·4·k per tile product.
func BenchmarkQ4Tile(b *testing.B) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, k := range []int{2048, 5632} {
		nb := k / 32
		w := tileRowsFixture(b, r, nb, nb*q4_0Bytes)
		buf := make([]byte, nb*tileBlockBytes+64)
		tile := buf[tileAlign(&buf[0]):]
		x := randActs(r, Q4_0, k, MaxCols, nb*q8_0Bytes)
		out := make([]float32, MaxCols*tileRows)
		b.Run(fmt.Sprintf("repack/k=%d", k), func(b *testing.B) {
			b.SetBytes(int64(tileRows * nb * q4_0Bytes))
			b.ReportAllocs()
			best := time.Duration(math.MaxInt64)
			for b.Loop() {
				t0 := time.Now()
				q4RepackAVX2(nb, &w[0], nb*q4_0Bytes, &tile[0])
				best = min(best, time.Since(t0))
			}
			reportBest(b, best, float64(tileRows*nb*q4_0Bytes), 0)
		})
		q4RepackAVX2(nb, &w[0], nb*q4_0Bytes, &tile[0])
		b.Run(fmt.Sprintf("product/k=%d", k), func(b *testing.B) {
			b.ReportAllocs()
			best := time.Duration(math.MaxInt64)
			for b.Loop() {
				t0 := time.Now()
				q4TileAVX2(nb, &tile[0], &x[0], nb*q8_0Bytes, MaxCols, &out[0], tileRows)
				best = min(best, time.Since(t0))
			}
			flops := float64(2 * tileRows * MaxCols * k)
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			reportBest(b, best, float64(tileRows*nb*q4_0Bytes), flops)
		})
	}
}
