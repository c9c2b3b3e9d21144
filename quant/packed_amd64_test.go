package quant

import (
	"encoding/binary"
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

// panelSentinel fills the panel tests' outputs: a kernel must leave it outside its results.
const panelSentinel = float32(-3.5)

// panelOut returns the output for a panel call writing rows rows of nx columns outStride apart,
// one float longer than the call may write, all panelSentinel.
func panelOut(rows, nx, outStride int) []float32 {
	out := make([]float32, (nx-1)*outStride+rows+1)
	for i := range out {
		out[i] = panelSentinel
	}
	return out
}

// eachPanelResult calls check(i, r, j) for each element out[i] that holds row r, column j of a
// panel call's rows x nx results (outStride apart), and fails if any other element is not
// panelSentinel.
func eachPanelResult(t testing.TB, out []float32, rows, nx, outStride int, check func(i, r, j int)) {
	t.Helper()
	for i := range out {
		j, r := i/outStride, i%outStride
		if j >= nx || r >= rows {
			if out[i] != panelSentinel {
				t.Fatalf("out[%d] outside the panel was written", i)
			}
			continue
		}
		check(i, r, j)
	}
}

// checkPanel compares the AVX2 panel kernel of typ (Q4_0, Q8_0, MXFP4, Q4_K or Q6_K) with its Go
// twin on one panel (8 rows of file-layout weights w with nb blocks, packed here) and nx activation
// rows xStride bytes apart, within asmRelTol of Σ|terms| (absDot; kPackMag for the K-quants,
// whose kernels sum the same exact integers per super-block and differ in float32 rounding
// only), and checks that nothing outside the 8 x nx outputs is written.
func checkPanel(t testing.TB, typ Type, nb int, w, x []byte, xStride, nx, outStride int) {
	t.Helper()
	k := nb * typ.BlockSize()
	isK := typ == Q4_K || typ == Q6_K
	p := make([]byte, len(w))
	if err := PackRows(typ, k, p, w); err != nil {
		t.Fatal(err)
	}
	var sums []int32
	if !isK {
		sums = make([]int32, sumWords*nb)
		// The multiplier of the AVX2 kernel (8 for Q4_0, 12 for MXFP4; Q8_0 reads no corrections).
		q4SumsGo(nb, x, xStride, nx, max(8, types[typ].kernels.panel[cpu.AVX2].sumsMul), sums)
		if typ == Q4_0 {
			checkSums(t, nb, x, xStride, nx, 8, sums)
		}
	}
	got, want := panelOut(PanelRows, nx, outStride), panelOut(PanelRows, nx, outStride)
	panelAVX2(typ, 1, nb, p, x, xStride, nx, got, outStride, sums)
	switch typ {
	case Q4_K:
		panelQ4KGo(nb, p, x, xStride, nx, want, outStride)
	case Q6_K:
		panelQ6KGo(nb, p, x, xStride, nx, want, outStride)
	default:
		panelProductGo(typ, nb, p, x, xStride, nx, want, outStride)
	}
	rowBytes, xRow := typ.RowSize(k), ActType(typ).RowSize(k)
	eachPanelResult(t, got, PanelRows, nx, outStride, func(i, r, j int) {
		wr, xr := w[r*rowBytes:(r+1)*rowBytes], x[j*xStride:j*xStride+xRow]
		var mag float64
		if isK {
			mag = kPackMag(typ, k, wr, xr)
			if wv := float64(want[i]); math.IsNaN(wv) || math.IsInf(wv, 0) || math.IsNaN(mag) || mag > 1e30 {
				return // NaN or overflowing scales: only the absence of a crash is checked
			}
		} else if mag = absDot(t, typ, k, wr, xr); math.IsInf(mag, 0) || mag > 1e36 {
			return
		}
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= asmRelTol*mag+asmAbsTol) {
			t.Fatalf("%v nb=%d nx=%d row %d column %d: asm %v, Go twin %v (|diff| %.3g, Σ|terms| %.3g)",
				typ, nb, nx, r, j, got[i], want[i], d, mag)
		}
	})
}

func panelRows(t testing.TB, r *rand.Rand, typ Type, nb int) []byte {
	var w []byte
	for row := 0; row < PanelRows; row++ {
		w = append(w, randWeights(t, r, typ, 32*nb)...)
	}
	return w
}

func TestPanelAsmMatchesGo(t *testing.T) {
	for _, typ := range []Type{Q4_0, Q8_0, MXFP4} {
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

// addPanelSeeds adds the seeds of the panel fuzz targets of typ, drawn from the stream seed:
// 8 weight rows and activation rows of 1, 3 and 9 blocks (Q4_0, Q8_0: 4 columns) or of 1, 2 and
// 3 super-blocks (K-quants: 1, 4 and 3 columns, file-layout and raw bytes).
func addPanelSeeds(f *testing.F, typ Type, seed uint64) {
	r := rand.New(rand.NewPCG(seed, uint64(typ)))
	if typ == Q4_K || typ == Q6_K {
		for _, nb := range []int{1, 2, 3} {
			nx := []int{1, 4, 3}[nb-1]
			w := kqWeights(f, typ, QK_K*nb, PanelRows, nb != 2, r.Uint64())
			x := kqActs(typ, QK_K*nb, nx, Q8_K.RowSize(QK_K*nb), nb == 3, r.Uint64())
			f.Add(append(w, x...), uint8(nx-1))
		}
		return
	}
	for _, nb := range []int{1, 3, 9} {
		w := panelRows(f, r, typ, nb)
		x := randActs(r, typ, nb*32, MaxCols, nb*q8_0Bytes)
		f.Add(append(w, x...), uint8(3))
	}
}

// panelFuzzInputs cuts a panel fuzz target's data into 8 weight rows of typ and nx = 1 +
// nxb%MaxCols activation rows xRow bytes long, of nb blocks (as many as fit; for the K-quants,
// whose loops do not depend on nb, at most 6), copied and made usable: Q4_0 and Q8_0 scales
// finite and activation quants in [-127, 127] (sanitizeWeights, sanitizeActs); K-quant f16
// scales finite, activation scales finite and not tiny (see kqFuzz), bsums consistent. nb is 0
// when data is too short.
func panelFuzzInputs(typ Type, data []byte, nxb uint8) (w, x []byte, nb, nx, xRow int) {
	isK := typ == Q4_K || typ == Q6_K
	nx = 1 + int(nxb)%MaxCols
	nb = len(data) / (PanelRows*typ.TypeSize() + nx*ActType(typ).TypeSize())
	if isK {
		nb = min(nb, 6)
	}
	if nb == 0 {
		return nil, nil, 0, nx, 0
	}
	k := nb * typ.BlockSize()
	rowBytes := typ.RowSize(k)
	xRow = ActType(typ).RowSize(k)
	w = append([]byte(nil), data[:PanelRows*rowBytes]...)
	x = append([]byte(nil), data[PanelRows*rowBytes:PanelRows*rowBytes+nx*xRow]...)
	if !isK {
		sanitizeWeights(typ, w)
		sanitizeActs(typ, x)
		return w, x, nb, nx, xRow
	}
	for o := 0; o < len(w); o += typ.TypeSize() {
		for _, h := range kqF16Offsets(typ) {
			sanitizeHalf(w[o+h:])
		}
	}
	for o := 0; o < len(x); o += q8_KBytes {
		d := math.Float32frombits(binary.LittleEndian.Uint32(x[o:]))
		if a := math.Abs(float64(d)); !(a == 0 || a >= 1e-20 && a <= 1e4) {
			binary.LittleEndian.PutUint32(x[o:], math.Float32bits(1))
		}
	}
	kqFixBsums(x)
	return w, x, nb, nx, xRow
}

// fuzzPanel packs 8 rows of typ made of arbitrary bytes (panelFuzzInputs; seeds from the stream
// seed) and compares the AVX2 panel kernel with its Go twin.
func fuzzPanel(f *testing.F, typ Type, seed uint64) {
	addPanelSeeds(f, typ, seed)
	f.Fuzz(func(t *testing.T, data []byte, nxb uint8) {
		if !hasPanelAsm() {
			t.Skip("no AVX2")
		}
		w, x, nb, nx, xRow := panelFuzzInputs(typ, data, nxb)
		if nb == 0 {
			return
		}
		checkPanel(t, typ, nb, w, x, xRow, nx, PanelRows+1)
	})
}

func FuzzPanelQ4_0(f *testing.F) { fuzzPanel(f, Q4_0, 13) }

func FuzzPanelQ8_0(f *testing.F) { fuzzPanel(f, Q8_0, 13) }

func FuzzPanelMXFP4(f *testing.F) { fuzzPanel(f, MXFP4, 13) }

// BenchmarkMatMulPacked multiplies a 2048x2048 (or, for ffn_down's shape, 2048x5632) packed
// matrix of each packable type with nTok tokens on one goroutine, next to MatMul over the same
// unpacked rows with the single-row assembly kernel. GFLOP/s counts 2·rows·k·nTok; MB/s the
// weight bytes once per call.
func BenchmarkMatMulPacked(b *testing.B) {
	if !hasPanelAsm() {
		b.Skip("no AVX2")
	}
	for _, typ := range []Type{Q4_0, Q8_0, Q4_K, Q6_K, MXFP4} {
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
	for _, typ := range []Type{Q4_0, Q8_0, Q4_K, Q6_K, MXFP4} {
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
