package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	xcpu "golang.org/x/sys/cpu"

	"ubatch/internal/cpu"
	"ubatch/internal/cputime"
)

// Tests of the kernel paths (path.go): every assembly path, forced in turn, against the Go twins
// and, bit for bit, against the AVX2 kernels. A path the CPU lacks skips with a message.

var asmPaths = []struct {
	name string
	path cpu.Path
}{{"avx2", cpu.AVX2}, {"avxvnni", cpu.AVXVNNI}, {"avx512vnni", cpu.AVX512VNNI}, {"avxvnni-evex", cpu.AVXVNNIEvex}}

// pathOnCPU reports whether the CPU runs path p (the EVEX twin of the avxvnni code needs AVX-512
// VNNI).
func pathOnCPU(p cpu.Path) bool { return cpu.Has(p) }

// forcePath selects p for the rest of t and restores the previous selection afterwards, or skips
// t if the CPU lacks p.
func forcePath(t testing.TB, p cpu.Path) {
	t.Helper()
	if !pathOnCPU(p) {
		t.Skipf("this CPU lacks the %v kernel path (it has %v)", p, KernelPaths())
	}
	old := cpu.Use(p)
	t.Cleanup(func() { cpu.Use(old) })
}

// panelAVX2 runs the AVX2 panel kernel of wt, whatever the selected path: the reference the
// other paths must match bit for bit.
func panelAVX2(wt Type, np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, sums []int32) {
	types[wt].kernels.panel[cpu.AVX2].run(np, nb, w, x, xStride, nx, out, outStride, sums)
}

// panelPathFor is the path whose panel kernel runs for wt on the selected path.
func panelPathFor(wt Type) cpu.Path { return types[wt].kernels.panelPath[cpu.Selected()] }

// checkPanelPath runs the panel kernel of the selected path on the panels of w (file-layout
// weights of typ, a multiple of 8 rows, packed here) and nx activation rows in one call, and
// checks each of the rows x nx results
// against the Go twin within the tolerance of the AVX2 tests and bit for bit against the AVX2
// kernel (both compute the same exact integer sums and scale them with the same instructions),
// and that nothing outside the panel is written.
func checkPanelPath(t testing.TB, typ Type, nb int, w, x []byte, xStride, nx, outStride int) {
	t.Helper()
	k := nb * typ.BlockSize()
	rowBytes, xRow := typ.RowSize(k), ActType(typ).RowSize(k)
	np := len(w) / (PanelRows * rowBytes)
	p := make([]byte, len(w))
	if err := PackRows(typ, k, p, w); err != nil {
		t.Fatal(err)
	}
	var sums, sums2 []int32
	if needsSums(typ) {
		sums = make([]int32, sumWords*nb)
		panelSums(typ, nb, x, xStride, nx, sums)
		want := make([]int32, sumWords*nb)
		q4SumsGo(nb, x, xStride, nx, sumsMul(typ), want)
		checkSums(t, nb, x, xStride, nx, sumsMul(typ), want)
		for i := range want {
			if i%4 < nx && sums[i] != want[i] {
				t.Fatalf("%v activation sums word %d = %#x, want %#x", typ, i, sums[i], want[i])
			}
		}
	}
	if typ == Q4_0 || typ == Q8_0 {
		mul := int32(0) // the AVX2 kernels' sums (sumsMul with the AVX2 path)
		if typ == Q4_0 {
			mul = 8
		}
		sums2 = make([]int32, sumWords*nb)
		q4SumsGo(nb, x, xStride, nx, mul, sums2)
	}
	got, ref, want := panelOut(np*PanelRows, nx, outStride), panelOut(np*PanelRows, nx, outStride), panelOut(np*PanelRows, nx, outStride)
	panelKernel(typ, np, nb, p, x, xStride, nx, got, outStride, sums)
	panelAVX2(typ, np, nb, p, x, xStride, nx, ref, outStride, sums2)
	if typ == Q4_0 || typ == Q8_0 {
		// The AVX2 path runs two panels at once for 2+ columns: the one-panel kernel, run over
		// the np panels, is the reference for both.
		one := panelOut(np*PanelRows, nx, outStride)
		k := map[Type]panelAsm{Q8_0: q8PanelAVX2, Q4_0: q4PanelAVX2}[typ]
		asmPanel(typ, k)(np, nb, p, x, xStride, nx, one, outStride, sums2)
		for i := range one {
			if math.Float32bits(one[i]) != math.Float32bits(ref[i]) && !(one[i] != one[i] && ref[i] != ref[i]) {
				t.Fatalf("%v np=%d nb=%d nx=%d out[%d]: AVX2 kernel %v, one-panel AVX2 kernel %v (must be bit-identical)", typ, np, nb, nx, i, ref[i], one[i])
			}
		}
	}
	panelGo(typ, np, nb, p, x, xStride, nx, want, outStride)
	eachPanelResult(t, got, np*PanelRows, nx, outStride, func(i, r, j int) {
		where := fmt.Sprintf("%v %v nb=%d nx=%d row %d column %d", panelPathFor(typ), typ, nb, nx, r, j)
		if math.Float32bits(got[i]) != math.Float32bits(ref[i]) && !(got[i] != got[i] && ref[i] != ref[i]) {
			t.Fatalf("%s: %v, AVX2 kernel %v (must be bit-identical)", where, got[i], ref[i])
		}
		wr, xr := w[r*rowBytes:(r+1)*rowBytes], x[j*xStride:j*xStride+xRow]
		var mag, tol float64
		if typ == Q4_K || typ == Q6_K {
			mag = kPackMag(typ, k, wr, xr)
			tol = 1e-5*mag + 1e-35
		} else {
			mag = absDot(t, typ, k, wr, xr)
			tol = asmRelTol*mag + asmAbsTol
		}
		wv := float64(want[i])
		if math.IsNaN(wv) || math.IsInf(wv, 0) || math.IsNaN(mag) || mag > 1e30 {
			return // overflowing scales: the bitwise comparison above is what is checked
		}
		if d := math.Abs(float64(got[i]) - wv); !(d <= tol) {
			t.Fatalf("%s: %v, Go twin %v (|diff| %.3g, Σ|terms| %.3g)", where, got[i], want[i], d, mag)
		}
	})
}

// panelTestInputs returns np panels (8np rows) of weights of typ with nb blocks and nx
// activation rows of the matching type, xStride bytes apart (with garbage between rows).
func panelTestInputs(t testing.TB, r *rand.Rand, typ Type, np, nb, nx int, raw bool) (w, x []byte, xStride int) {
	k := nb * typ.BlockSize()
	xStride = ActType(typ).RowSize(k) + r.IntN(40)
	if typ == Q4_K || typ == Q6_K {
		w = kqWeights(t, typ, k, np*PanelRows, raw, r.Uint64())
		return w, kqActs(typ, k, nx, xStride, raw, r.Uint64()), xStride
	}
	for range np {
		w = append(w, panelRows(t, r, typ, nb)...)
	}
	return w, randActs(r, typ, k, nx, xStride), xStride
}

func TestPanelPathsMatchGo(t *testing.T) {
	for _, ap := range asmPaths {
		t.Run(ap.name, func(t *testing.T) {
			forcePath(t, ap.path)
			for _, typ := range []Type{Q8_0, Q4_0, Q4_K, Q6_K} {
				r := rand.New(rand.NewPCG(23, uint64(typ)))
				nbs := []int{1, 2, 3, 7, 64, 176, 512}
				if typ == Q4_K || typ == Q6_K {
					nbs = []int{1, 2, 3, 8, 22}
				}
				for _, nb := range nbs {
					for nx := 1; nx <= MaxCols; nx++ {
						// One panel or three, two or four, and 3+nx and 12-nx: the AVX-512 kernels
						// run fours of panels (2 columns or more), then a pair, then an odd last
						// one alone.
						for _, np := range []int{1 + nx%2*2, 2 + (nx+1)%2*2, 3 + nx, 12 - nx} {
							w, x, xStride := panelTestInputs(t, r, typ, np, nb, nx, nb%2 == 1)
							for _, outStride := range []int{np * PanelRows, np*PanelRows + 5, max(64, np*PanelRows+16)} {
								t.Run(fmt.Sprintf("%v/np=%d/nb=%d/nx=%d/stride=%d", typ, np, nb, nx, outStride), func(t *testing.T) {
									checkPanelPath(t, typ, nb, w, x, xStride, nx, outStride)
								})
							}
						}
					}
				}
			}
		})
	}
}

// TestPanelPathsExtremes runs every path on the weights and activation quants at the bounds of
// the integer sums: Q8_0 weights -128 and 127, Q4_0 nibbles 0 and 15, times activations ±127.
func TestPanelPathsExtremes(t *testing.T) {
	cases := []struct {
		name   string
		typ    Type
		wq     byte // every quant byte of the weights
		xq     int8
		weight float64 // the weight value of wq
	}{
		{"Q8_0 -128 x 127", Q8_0, 0x80, 127, -128},
		{"Q8_0 -128 x -127", Q8_0, 0x80, -127, -128},
		{"Q8_0 127 x -127", Q8_0, 0x7f, -127, 127},
		{"Q4_0 0 x 127", Q4_0, 0x00, 127, -8},
		{"Q4_0 15 x -127", Q4_0, 0xff, -127, 7},
	}
	// Five panels: the kernels that run several at once (four, two) and the one-panel kernel.
	const nb, np = 3, 5
	for _, ap := range asmPaths {
		for _, c := range cases {
			t.Run(ap.name+"/"+c.name, func(t *testing.T) {
				forcePath(t, ap.path)
				bs := c.typ.TypeSize()
				w := make([]byte, np*PanelRows*nb*bs)
				for i := range w {
					w[i] = c.wq
				}
				for o := 0; o < len(w); o += bs {
					w[o], w[o+1] = 0x00, 0x3c // scale 1.0
				}
				x := make([]byte, MaxCols*nb*q8_0Bytes)
				for o := 0; o < len(x); o += q8_0Bytes {
					x[o], x[o+1] = 0x00, 0x3c
					for i := 2; i < q8_0Bytes; i++ {
						x[o+i] = byte(c.xq)
					}
				}
				want := float32(nb * 32 * c.weight * float64(c.xq))
				p := make([]byte, len(w))
				if err := PackRows(c.typ, 32*nb, p, w); err != nil {
					t.Fatal(err)
				}
				out := make([]float32, MaxCols*np*PanelRows)
				sums := make([]int32, sumWords*nb)
				for nx := 1; nx <= MaxCols; nx++ {
					if needsSums(c.typ) {
						panelSums(c.typ, nb, x, nb*q8_0Bytes, nx, sums)
					}
					panelKernel(c.typ, np, nb, p, x, nb*q8_0Bytes, nx, out, np*PanelRows, sums)
					for i, v := range out[:nx*np*PanelRows] {
						if v != want {
							t.Fatalf("nx=%d out[%d] = %v, want %v", nx, i, v, want)
						}
					}
				}
			})
		}
	}
}

// TestPanelKPathsExtremes is TestPanelKExtremes (packed_k_amd64_test.go) on every path: the
// largest levels, scales and mins (Q4_K levels 15, scales and mins 63; Q6_K levels 63, scales
// -128) against activation quants of -128 and 127, exact results.
func TestPanelKPathsExtremes(t *testing.T) {
	for _, ap := range asmPaths {
		for _, c := range []struct {
			typ Type
			xq  int8
		}{{Q4_K, -128}, {Q4_K, 127}, {Q6_K, -128}, {Q6_K, 127}} {
			t.Run(fmt.Sprintf("%s/%v/%d", ap.name, c.typ, c.xq), func(t *testing.T) {
				forcePath(t, ap.path)
				checkPanelKExtremes(t, c.typ, c.xq, panelKernel)
			})
		}
	}
}

// TestMatMulPackedPaths runs MatMulPacked on packedCases and packedKCases with each path forced
// (the sums chunking included)
// against the Go row kernel.
func TestMatMulPackedPaths(t *testing.T) {
	for _, ap := range asmPaths {
		t.Run(ap.name, func(t *testing.T) {
			forcePath(t, ap.path)
			for _, c := range packedCases() {
				runMatMulPacked(t, c, packTol)
			}
			for _, c := range packedKCases() {
				runMatMulPacked(t, c, func(f *matmulFixture, r, tok int) float64 {
					return 1e-5*kPackMag(c.typ, c.k, f.w[r*f.rowBytes:], f.xq[tok*f.xRow:]) + 1e-30
				})
			}
		})
	}
}

func TestPanelPathsNoAlloc(t *testing.T) {
	for _, ap := range asmPaths {
		t.Run(ap.name, func(t *testing.T) {
			forcePath(t, ap.path)
			for _, typ := range []Type{Q4_0, Q8_0, Q4_K, Q6_K, MXFP4} {
				f := newMatmulFixture(t, typ, 2048, 16, 9)
				p := packFixture(t, f)
				out := make([]float32, 9*16)
				if n := testing.AllocsPerRun(5, func() { MatMulPacked(typ, 2048, p, f.xq, 9, out, 16, 0, 16) }); n != 0 {
					t.Errorf("%v: MatMulPacked allocates %v times per call", typ, n)
				}
			}
		})
	}
}

// TestKernelPathSelection checks the start-up choice against the CPU's features and
// SetKernelPath's names and errors.
func TestKernelPathSelection(t *testing.T) {
	defer cpu.Use(cpu.Selected())
	best := cpu.AVX2
	switch {
	case !cpu.HasAVX2:
		best = cpu.Go
	case xcpu.X86.HasAVX512F && xcpu.X86.HasAVX512VL && xcpu.X86.HasAVX512VNNI:
		best = cpu.AVX512VNNI
	case xcpu.X86.HasAVXVNNI:
		best = cpu.AVXVNNI
	}
	if got := cpu.Paths()[0]; got != best {
		t.Fatalf("best path %v, want %v for this CPU", got, best)
	}
	has := func(p cpu.Path) bool { return slices.Contains(cpu.Paths(), p) }
	cases := []struct {
		name string
		ok   bool
		want cpu.Path
	}{
		{"auto", true, best},
		{"avx2", cpu.HasAVX2, cpu.AVX2},
		{"avxvnni", has(cpu.AVXVNNI), cpu.AVXVNNI},
		{"avx512vnni", has(cpu.AVX512VNNI), cpu.AVX512VNNI},
		{"go", true, cpu.Go},
		{"avxvnni-evex", false, 0},
		{"neon", false, 0},
		{"sse2", false, 0},
		{"", false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cpu.Use(best)
			err := SetKernelPath(c.name)
			if (err == nil) != c.ok {
				t.Fatalf("SetKernelPath(%q) = %v, want ok=%v (CPU paths %v)", c.name, err, c.ok, KernelPaths())
			}
			if c.ok && KernelPath() != c.want.String() {
				t.Fatalf("KernelPath() = %q after SetKernelPath(%q)", KernelPath(), c.name)
			}
			if !c.ok && cpu.Selected() != best {
				t.Fatalf("a failed SetKernelPath changed the path to %v", cpu.Selected())
			}
		})
	}
	// The K-quants have VNNI panel kernels on AVX-512 only: AVX-VNNI runs their AVX2 ones.
	for _, typ := range []Type{Q8_0, Q4_0, Q4_K, Q6_K} {
		cpu.Use(best)
		want := best
		if best == cpu.AVXVNNI && (typ == Q4_K || typ == Q6_K) {
			want = cpu.AVX2
		}
		if got := PanelKernelPath(typ); got != want.String() {
			t.Errorf("PanelKernelPath(%v) = %q, want %q", typ, got, want)
		}
	}
	if got := PanelKernelPath(F16); got != "" {
		t.Errorf("PanelKernelPath(F16) = %q, want \"\"", got)
	}
}

// fuzzPanelPaths packs 8 rows of typ made of arbitrary bytes (panelFuzzInputs; seeds from the
// stream seed) and runs checkPanelPath on every VNNI path the CPU has with kernels for typ: for
// the K-quants the AVX-512 VNNI path only.
func fuzzPanelPaths(f *testing.F, typ Type, seed uint64) {
	addPanelSeeds(f, typ, seed)
	f.Fuzz(func(t *testing.T, data []byte, nxb uint8) {
		var paths []cpu.Path
		for _, ap := range asmPaths {
			// AVX2 too for Q8_0 and Q4_0: checkPanelPath compares its multi-panel kernels with
			// its one-panel ones.
			if pathOnCPU(ap.path) && (ap.path == cpu.AVX512VNNI || typ != Q4_K && typ != Q6_K) && (ap.path != cpu.AVX2 || typ == Q8_0 || typ == Q4_0) {
				paths = append(paths, ap.path)
			}
		}
		if len(paths) == 0 {
			t.Skipf("this CPU has no VNNI kernel path for %v (it has %v)", typ, KernelPaths())
		}
		w, x, nb, nx, xRow := panelFuzzInputs(typ, data, nxb)
		if nb == 0 {
			return
		}
		w7 := rotatedPanels(w, 7)
		for _, p := range paths {
			forcePath(t, p)
			checkPanelPath(t, typ, nb, w, x, xRow, nx, PanelRows+1)
			checkPanelPath(t, typ, nb, w7, x, xRow, nx, 7*PanelRows+1)
		}
	})
}

// rotatedPanels returns np panels made of the 8 rows in w (file layout): panel i holds them
// rotated by i, row r being w's row (r+i)%8, so that the kernels that run several panels at once
// (four, two, then one for np = 7) see different rows in every lane.
func rotatedPanels(w []byte, np int) []byte {
	rowBytes := len(w) / PanelRows
	out := make([]byte, 0, np*len(w))
	for i := range np {
		for r := range PanelRows {
			j := (r + i) % PanelRows
			out = append(out, w[j*rowBytes:(j+1)*rowBytes]...)
		}
	}
	return out
}

func FuzzPanelPathsQ8_0(f *testing.F) { fuzzPanelPaths(f, Q8_0, 29) }

func FuzzPanelPathsQ4_K(f *testing.F) { fuzzPanelPaths(f, Q4_K, 31) }

func FuzzPanelPathsQ6_K(f *testing.F) { fuzzPanelPaths(f, Q6_K, 31) }

func FuzzPanelPathsQ4_0(f *testing.F) { fuzzPanelPaths(f, Q4_0, 29) }

// BenchmarkPanelPaths runs MatMulPacked on a 2048x2048 packed matrix with nTok tokens on one
// goroutine, with each kernel path the CPU has. GFLOP/s counts 2·rows·k·nTok; best-* metrics are
// those of the fastest call.
func BenchmarkPanelPaths(b *testing.B) {
	const k, nRows = 2048, 2048
	for _, typ := range []Type{Q8_0, Q4_0, Q4_K, Q6_K} {
		for _, nTok := range []int{1, 4, 64} {
			f := newMatmulFixture(b, typ, k, nRows, nTok)
			p := packFixture(b, f)
			out := make([]float32, nTok*nRows)
			for _, ap := range asmPaths {
				b.Run(fmt.Sprintf("%v/tok=%d/%s", typ, nTok, ap.name), func(b *testing.B) {
					forcePath(b, ap.path)
					b.SetBytes(int64(len(f.w)))
					b.ReportAllocs()
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					best, bestCPU := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
					for b.Loop() {
						t0 := time.Now()
						c0, _ := cputime.Thread()
						MatMulPacked(typ, k, p, f.xq, nTok, out, nRows, 0, nRows)
						c1, _ := cputime.Thread()
						best, bestCPU = min(best, time.Since(t0)), min(bestCPU, c1-c0)
					}
					flops := 2 * float64(k*nRows*nTok)
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					reportBest(b, best, float64(len(f.w)), flops)
					if bestCPU > 0 && bestCPU < time.Duration(math.MaxInt64) {
						// The thread's own CPU time: what the kernel does when it has the core.
						b.ReportMetric(flops/bestCPU.Seconds()/1e9, "best-cpu-GFLOP/s")
					}
				})
			}
		}
	}
}

// TestHelperKernelPaths: the kernels outside the type table (the Q8_0 quantizer, the panels'
// activation sums, the F16 conversion) resolve to their AVX2 kernels on every amd64 path and to
// their Go twins on "go" (and on the arm64 paths, which amd64 never selects).
func TestHelperKernelPaths(t *testing.T) {
	helpers := []struct {
		name  string
		paths *[cpu.NumPaths]cpu.Path
	}{{"quantizeQ8_0", &quantizeQ8Paths}, {"q4Sums", &q4SumsPaths}, {"f32ToF16s", &f32ToF16sPaths}}
	for _, tc := range []struct {
		name string
		path cpu.Path
		want cpu.Path
	}{
		{"go", cpu.Go, cpu.Go}, {"avx2", cpu.AVX2, cpu.AVX2}, {"avxvnni", cpu.AVXVNNI, cpu.AVX2},
		{"avx512vnni", cpu.AVX512VNNI, cpu.AVX2}, {"avxvnni-evex", cpu.AVXVNNIEvex, cpu.AVX2},
		{"neon", cpu.NEON, cpu.Go}, {"neon-dp", cpu.NEONDP, cpu.Go},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, h := range helpers {
				if got := h.paths[tc.path]; got != tc.want {
					t.Errorf("%s on %v runs the %v kernel, want %v", h.name, tc.path, got, tc.want)
				}
			}
		})
	}
}
