package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"ubatch/internal/cpu"
)

// checkSums compares q4Sums with multiplier mul with want, q4SumsGo's words.
func checkSums(t testing.TB, nb int, x []byte, xStride, nx int, mul int32, want []int32) {
	t.Helper()
	got := make([]int32, sumWords*nb)
	q4Sums(nb, x, xStride, nx, mul, got)
	for i := range got {
		if i%4 < nx && got[i] != want[i] {
			t.Fatalf("activation sums word %d (block %d column %d) = %#x, Go twin %#x", i, i/sumWords, i%4, got[i], want[i])
		}
	}
}

// checkPanel compares the assembly panel kernel with its Go twin on one panel (8 rows of raw
// file-layout weights w, packed here) and nx activation rows, and checks that nothing outside
// the 8 x nx outputs is written.
func checkPanel(t testing.TB, typ Type, nb int, w, x []byte, xStride, nx, outStride int) {
	t.Helper()
	k := 32 * nb
	p := make([]byte, len(w))
	if err := PackRows(typ, k, p, w); err != nil {
		t.Fatal(err)
	}
	sums := make([]int32, sumWords*nb)
	q4SumsGo(nb, x, xStride, nx, 8, sums)
	if typ == Q4_0 {
		checkSums(t, nb, x, xStride, nx, 8, sums)
	}
	const sentinel = float32(-3.5)
	n := (nx-1)*outStride + PanelRows + 1
	got, want := make([]float32, n), make([]float32, n)
	for i := range got {
		got[i], want[i] = sentinel, sentinel
	}
	panelAVX2(typ, 1, nb, p, x, xStride, nx, got, outStride, sums)
	panelProductGo(typ, nb, p, x, xStride, nx, want, outStride)
	rowBytes := typ.RowSize(k)
	for i := range got {
		j, r := i/outStride, i%outStride
		if j >= nx || r >= PanelRows {
			if got[i] != sentinel {
				t.Fatalf("out[%d] outside the panel was written", i)
			}
			continue
		}
		mag := absDot(t, typ, k, w[r*rowBytes:(r+1)*rowBytes], x[j*xStride:j*xStride+nb*q8_0Bytes])
		if math.IsInf(mag, 0) || mag > 1e36 {
			continue
		}
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= asmRelTol*mag+asmAbsTol) {
			t.Fatalf("%v nb=%d nx=%d row %d column %d: asm %v, Go twin %v (|diff| %.3g, Σ|terms| %.3g)",
				typ, nb, nx, r, j, got[i], want[i], d, mag)
		}
	}
}

func panelRows(t testing.TB, r *rand.Rand, typ Type, nb int) []byte {
	var w []byte
	for row := 0; row < PanelRows; row++ {
		w = append(w, randWeights(t, r, typ, 32*nb)...)
	}
	return w
}

func TestPanelAsmMatchesGo(t *testing.T) {
	for _, typ := range []Type{Q4_0, Q8_0} {
		if !hasPanelAsm() {
			t.Skip("no AVX2")
		}
		r := rand.New(rand.NewPCG(11, uint64(typ)))
		for _, nb := range []int{1, 2, 3, 7, 64, 176, 512} {
			w := panelRows(t, r, typ, nb)
			for nx := 1; nx <= MaxCols; nx++ {
				xStride := nb*q8_0Bytes + r.IntN(40)
				x := randActs(r, typ, nb*32, nx, xStride)
				for _, outStride := range []int{PanelRows, PanelRows + 5, 64} {
					t.Run(fmt.Sprintf("%v/nb=%d/nx=%d/stride=%d", typ, nb, nx, outStride), func(t *testing.T) {
						checkPanel(t, typ, nb, w, x, xStride, nx, outStride)
					})
				}
			}
		}
	}
}

// fuzzPanel packs 8 rows of typ made of arbitrary bytes (scales made finite, activation quants
// in [-127, 127]) and compares the assembly panel kernel with its Go twin.
func fuzzPanel(f *testing.F, typ Type) {
	r := rand.New(rand.NewPCG(13, uint64(typ)))
	for _, nb := range []int{1, 3, 9} {
		w := panelRows(f, r, typ, nb)
		x := randActs(r, typ, nb*32, MaxCols, nb*q8_0Bytes)
		f.Add(append(w, x...), uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, nxb uint8) {
		if !hasPanelAsm() {
			t.Skip("no AVX2")
		}
		nx := 1 + int(nxb)%MaxCols
		nb := len(data) / (PanelRows*typ.TypeSize() + nx*q8_0Bytes)
		if nb == 0 {
			return
		}
		rowBytes, xRow := typ.RowSize(nb*32), nb*q8_0Bytes
		w := append([]byte(nil), data[:PanelRows*rowBytes]...)
		x := append([]byte(nil), data[PanelRows*rowBytes:PanelRows*rowBytes+nx*xRow]...)
		sanitizeWeights(typ, w)
		sanitizeActs(typ, x)
		checkPanel(t, typ, nb, w, x, xRow, nx, PanelRows+1)
	})
}

func FuzzPanelQ4_0(f *testing.F) { fuzzPanel(f, Q4_0) }

func FuzzPanelQ8_0(f *testing.F) { fuzzPanel(f, Q8_0) }

// BenchmarkMatMulPacked multiplies a 2048x2048 (or, for ffn_down's shape, 2048x5632) packed
// matrix of each packable type with nTok tokens on one goroutine, next to MatMul over the same
// unpacked rows with the single-row assembly kernel. GFLOP/s counts 2·rows·k·nTok; MB/s the
// weight bytes once per call.
func BenchmarkMatMulPacked(b *testing.B) {
	if !hasPanelAsm() {
		b.Skip("no AVX2")
	}
	for _, typ := range []Type{Q4_0, Q8_0, Q4_K, Q6_K} {
		for _, k := range []int{2048, 5632} {
			const nRows = 2048
			for _, nTok := range []int{1, 4, 16, 64} {
				f := newMatmulFixture(b, typ, k, nRows, nTok)
				p := packFixture(b, f)
				out := make([]float32, nTok*nRows)
				for _, impl := range []string{"packed", "rows"} {
					b.Run(fmt.Sprintf("%v/k=%d/tok=%d/%s", typ, k, nTok, impl), func(b *testing.B) {
						b.SetBytes(int64(len(f.w)))
						b.ReportAllocs()
						best := time.Duration(math.MaxInt64)
						for b.Loop() {
							t0 := time.Now()
							if impl == "packed" {
								MatMulPacked(typ, k, p, f.xq, nTok, out, nRows, 0, nRows)
							} else {
								MatMul(types[typ].kernels.dot[cpu.AVX2], typ, k, f.w, f.xq, nTok, out, nRows, 0, nRows)
							}
							best = min(best, time.Since(t0))
						}
						flops := 2 * float64(k*nRows*nTok)
						b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
						reportBest(b, best, float64(len(f.w)), flops)
					})
				}
			}
		}
	}
}

// BenchmarkMatMulPackedStream multiplies one token by a packed matrix of about 96 MiB (k=2048;
// the panels of a packed 2048-row fixture repeated) of each packable type on one goroutine: far
// more than the last-level cache, so that it measures what single-stream decode does, streaming
// the weights from memory once per token. Compare its best-GB/s with ops.ReadBandwidth (ubatch
// bench --membw, one thread) rather than with the in-cache BenchmarkMatMulPacked.
func BenchmarkMatMulPackedStream(b *testing.B) {
	if !hasPanelAsm() {
		b.Skip("no AVX2")
	}
	const k, fixRows, streamBytes = 2048, 2048, 96 << 20
	for _, typ := range []Type{Q4_0, Q8_0, Q4_K, Q6_K} {
		f := newMatmulFixture(b, typ, k, fixRows, 1)
		p := packFixture(b, f)
		w := make([]byte, streamBytes/len(p)*len(p))
		for o := 0; o < len(w); o += len(p) {
			copy(w[o:], p)
		}
		nRows := len(w) / f.rowBytes
		out := make([]float32, nRows)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			b.ReportAllocs()
			best := time.Duration(math.MaxInt64)
			for b.Loop() {
				t0 := time.Now()
				MatMulPacked(typ, k, w, f.xq, 1, out, nRows, 0, nRows)
				best = min(best, time.Since(t0))
			}
			reportBest(b, best, float64(len(w)), 2*float64(k*nRows))
		})
	}
}
