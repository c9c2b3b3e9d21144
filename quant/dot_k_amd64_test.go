package quant

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ubatch/internal/cpu"
)

// Tests for the AVX2 K-quant kernels (dot_k_amd64.s) against their pure-Go twins.
//
// Tolerance: both compute the same exact integer sums per super-block and differ only in how the
// float32 products d·dx·isum and dmin·dx·msum are rounded and added (the assembly keeps 8 partial
// sums per column and uses FMA). The difference is therefore bounded by a small multiple of
// float32 epsilon (6e-8) times the number of blocks times S = Σ_i |x_i|·(|d·sc_i·q_i| + |dmin·m_i|)
// (Q4_K/Q5_K/Q2_K) or Σ_i |w_i·x_i| (Q6_K/Q3_K/IQ4_XS), the sum of the magnitudes of all terms before any
// cancellation. We require |asm − go| <= 1e-5·S, which holds with margin up to k = 5632 (22
// blocks) and fails on any wrong level, scale, min, bsum or column.

const kqTol = 1e-5

type kqKernel struct {
	typ  Type
	asm  DotFunc
	twin DotFunc
}

var kqKernels = []kqKernel{
	{Q4_K, dotQ4_KAVX2, dotQ4_KGo},
	{Q6_K, dotQ6_KAVX2, dotQ6_KGo},
	{Q5_K, dotQ5_KAVX2, dotQ5_KGo},
	{Q2_K, dotQ2_KAVX2, dotQ2_KGo},
	{Q3_K, dotQ3_KAVX2, dotQ3_KGo},
	{IQ4_XS, dotIQ4_XSAVX2, dotIQ4XSGo},
}

func kqNeedAVX2(t testing.TB) {
	t.Helper()
	if !cpu.HasAVX2 {
		t.Skip("CPU lacks AVX2/FMA/F16C/BMI2; the assembly kernels are not used")
	}
}

// kqF16Offsets are the byte offsets of the f16 scales in one block of typ: the super-scale d,
// then for the types with mins dmin.
func kqF16Offsets(typ Type) []int {
	switch typ {
	case Q6_K:
		return []int{208}
	case Q3_K:
		return []int{108}
	case IQ4_XS:
		return []int{0}
	case Q2_K:
		return []int{80, 82}
	}
	return []int{0, 2}
}

// kqWeights returns nRows rows of k weights of typ. Gaussian rows (LLM-like: small sigma, a
// per-row mean, rare outliers) go through Quantize; raw rows are random bytes whose f16 scales
// are random finite halves (any exponent, so subnormals and 65504 occur).
func kqWeights(t testing.TB, typ Type, k, nRows int, raw bool, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	rb := typ.RowSize(k)
	out := make([]byte, nRows*rb)
	if raw {
		for i := range out {
			out[i] = byte(r.Uint32())
		}
		for b := 0; b < len(out)/typ.TypeSize(); b++ {
			for _, o := range kqF16Offsets(typ) {
				h := uint16(r.Uint32())
				if h&0x7c00 == 0x7c00 { // Inf/NaN exponent: make it the largest finite one
					h &^= 0x0400
				}
				binary.LittleEndian.PutUint16(out[b*typ.TypeSize()+o:], h)
			}
		}
		return out
	}
	x := make([]float32, k)
	for row := 0; row < nRows; row++ {
		mean := r.NormFloat64() * 0.01
		for i := range x {
			v := mean + r.NormFloat64()*0.02
			if r.IntN(200) == 0 {
				v *= 10
			}
			x[i] = float32(v)
		}
		if err := Quantize(typ, x, out[row*rb:(row+1)*rb]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// kqActs returns nx Q8_K activation rows of k elements, stride bytes apart (the padding is junk).
// Gaussian rows (non-zero mean, rare large outliers as in real hidden states) go through
// QuantizeAct; raw rows have random quants over the full int8 range, a random d of either sign
// and consistent bsums.
func kqActs(typ Type, k, nx, stride int, raw bool, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 11))
	xs := make([]byte, (nx-1)*stride+Q8_K.RowSize(k))
	for i := range xs {
		xs[i] = byte(r.Uint32())
	}
	f := make([]float32, k)
	for j := 0; j < nx; j++ {
		row := xs[j*stride : j*stride+Q8_K.RowSize(k)]
		if !raw {
			for i := range f {
				f[i] = float32(0.2 + r.NormFloat64())
				if r.IntN(500) == 0 {
					f[i] *= 30
				}
			}
			QuantizeAct(typ, f, row)
			continue
		}
		for b := 0; b < k/QK_K; b++ {
			d := float32(math.Exp(r.NormFloat64() * 3))
			if r.IntN(2) == 0 {
				d = -d
			}
			binary.LittleEndian.PutUint32(row[b*q8_KBytes:], math.Float32bits(d))
		}
		kqFixActs(typ, row)
	}
	return xs
}

// kqFixActs makes arbitrary Q8_K quants in row valid for typ's kernel and rewrites the bsums.
// The IQ4_XS kernel multiplies signed levels the way ggml does (the quants take the levels'
// signs), which is exact for quants in [-127, 127], all that QuantizeAct writes; -128 becomes
// -127 for it.
func kqFixActs(typ Type, row []byte) {
	if typ == IQ4_XS {
		for b := 0; b < len(row)/q8_KBytes; b++ {
			for i := b*q8_KBytes + 4; i < b*q8_KBytes+4+QK_K; i++ {
				if row[i] == 0x80 {
					row[i] = 0x81
				}
			}
		}
	}
	kqFixBsums(row)
}

// kqFixBsums rewrites the bsums of every Q8_K block in row to match its quants.
func kqFixBsums(row []byte) {
	for b := 0; b < len(row)/q8_KBytes; b++ {
		blk := row[b*q8_KBytes : (b+1)*q8_KBytes]
		for g := 0; g < 16; g++ {
			var s int16
			for _, q := range blk[4+16*g : 4+16*g+16] {
				s += int16(int8(q))
			}
			binary.LittleEndian.PutUint16(blk[4+QK_K+2*g:], uint16(s))
		}
	}
}

// kqMag is S from the header comment for one weight row and one activation row, in float64.
func kqMag(t testing.TB, typ Type, k int, w, x []byte) float64 {
	xf := make([]float32, k)
	if err := Dequantize(Q8_K, x[:Q8_K.RowSize(k)], xf); err != nil {
		t.Fatal(err)
	}
	w = w[:typ.RowSize(k)]
	deq := func(zeroAt int) []float32 {
		wc := append([]byte(nil), w...)
		if zeroAt >= 0 {
			for b := 0; b < len(wc)/typ.TypeSize(); b++ {
				binary.LittleEndian.PutUint16(wc[b*typ.TypeSize()+zeroAt:], 0)
			}
		}
		wf := make([]float32, k)
		if err := Dequantize(typ, wc, wf); err != nil {
			t.Fatal(err)
		}
		return wf
	}
	var s float64
	offs := kqF16Offsets(typ)
	if len(offs) == 1 {
		for i, v := range deq(-1) {
			s += math.Abs(float64(v) * float64(xf[i]))
		}
		return s
	}
	scaled, mins := deq(offs[1]), deq(offs[0]) // dmin zeroed: d·sc·q; d zeroed: −dmin·m
	for i := range xf {
		s += math.Abs(float64(xf[i])) * (math.Abs(float64(scaled[i])) + math.Abs(float64(mins[i])))
	}
	return s
}

// kqCheck runs the assembly and Go kernels on one weight row and nx columns and reports any
// column outside the tolerance, any write past out[:nx], and any column that differs from a
// one-column assembly call. It returns the largest |asm − go|/S seen.
func kqCheck(t testing.TB, kk kqKernel, k int, w, xs []byte, stride, nx int) (worst float64) {
	t.Helper()
	var got, want [MaxCols + 1]float32
	got[nx], want[nx] = -7, -7
	kk.asm(k, w, xs, stride, nx, got[:nx])
	kk.twin(k, w, xs, stride, nx, want[:nx])
	if got[nx] != -7 {
		t.Fatalf("%v k=%d nx=%d: wrote past out[:nx]", kk.typ, k, nx)
	}
	for j := 0; j < nx; j++ {
		g, wv := float64(got[j]), float64(want[j])
		if math.IsNaN(wv) || math.IsInf(wv, 0) {
			continue
		}
		mag := kqMag(t, kk.typ, k, w, xs[j*stride:])
		if math.IsNaN(mag) || mag > 1e30 {
			continue
		}
		d := math.Abs(g - wv)
		if !(d <= kqTol*mag) {
			t.Fatalf("%v k=%d nx=%d column %d: asm %v, go %v (|diff| %.3g > %.0e·S, S = %.3g)",
				kk.typ, k, nx, j, got[j], want[j], d, kqTol, mag)
		}
		if mag > 0 {
			worst = max(worst, d/mag)
		}
		var one [1]float32
		kk.asm(k, w, xs[j*stride:], 0, 1, one[:])
		if math.Float32bits(one[0]) != math.Float32bits(got[j]) {
			t.Fatalf("%v k=%d nx=%d column %d: %v, one-column call %v", kk.typ, k, nx, j, got[j], one[0])
		}
	}
	return worst
}

func TestDotKAVX2MatchesGo(t *testing.T) {
	kqNeedAVX2(t)
	const nRows = 6
	for _, kk := range kqKernels {
		for _, k := range []int{256, 512, 2048, 5632} {
			for mode := 0; mode < 4; mode++ {
				rawW, rawX := mode&1 != 0, mode&2 != 0
				name := fmt.Sprintf("%v/k=%d/rawW=%v/rawX=%v", kk.typ, k, rawW, rawX)
				t.Run(name, func(t *testing.T) {
					seed := uint64(k*16 + mode)
					rb := kk.typ.RowSize(k)
					w := kqWeights(t, kk.typ, k, nRows, rawW, seed)
					stride := Q8_K.RowSize(k) + 44 // padded rows check that xStride is honoured
					xs := kqActs(kk.typ, k, MaxCols, stride, rawX, seed)
					var worst float64
					for row := 0; row < nRows; row++ {
						for nx := 1; nx <= MaxCols; nx++ {
							worst = max(worst, kqCheck(t, kk, k, w[row*rb:(row+1)*rb], xs, stride, nx))
						}
					}
					t.Logf("largest |asm-go|/S %.2g (tolerance %.0e)", worst, kqTol)
				})
			}
		}
	}
}

// TestDotKAVX2Extremes uses the largest levels, scales and mins against ±128/127 quants, where
// int16 saturation or a signed/unsigned mix-up in VPMADDUBSW would show.
func TestDotKAVX2Extremes(t *testing.T) {
	kqNeedAVX2(t)
	const k = 2 * QK_K
	for _, kk := range kqKernels {
		for _, wb := range []byte{0xff, 0x00, 0x80, 0x7f, 0xaa} {
			for _, xq := range []byte{0x80, 0x7f, 0x01, 0x00} {
				w := make([]byte, kk.typ.RowSize(k))
				for i := range w {
					w[i] = wb
				}
				for b := 0; b < k/QK_K; b++ {
					for _, o := range kqF16Offsets(kk.typ) {
						binary.LittleEndian.PutUint16(w[b*kk.typ.TypeSize()+o:], 0x3c00) // 1.0
					}
				}
				xs := make([]byte, Q8_K.RowSize(k))
				for b := 0; b < k/QK_K; b++ {
					blk := xs[b*q8_KBytes:]
					binary.LittleEndian.PutUint32(blk, math.Float32bits(0.5))
					for i := 4; i < 4+QK_K; i++ {
						blk[i] = xq
					}
				}
				kqFixActs(kk.typ, xs)
				for nx := 1; nx <= MaxCols; nx++ {
					kqCheck(t, kk, k, w, xs, 0, nx) // stride 0: all columns read the same row
				}
			}
		}
	}
}

func TestDotKAVX2Registered(t *testing.T) {
	kqNeedAVX2(t)
	for _, kk := range kqKernels {
		if KernelName(kk.typ) != "avx2" {
			t.Errorf("Kernel(%v) is %q, want the avx2 kernel", kk.typ, KernelName(kk.typ))
		}
	}
}

func TestDotKAVX2NoAlloc(t *testing.T) {
	kqNeedAVX2(t)
	const k = 1024
	for _, kk := range kqKernels {
		w := kqWeights(t, kk.typ, k, 1, false, 1)
		xs := kqActs(kk.typ, k, MaxCols, Q8_K.RowSize(k), false, 2)
		out := make([]float32, MaxCols)
		dot := Kernel(kk.typ)
		for nx := 1; nx <= MaxCols; nx++ {
			if n := testing.AllocsPerRun(20, func() { dot(k, w, xs, Q8_K.RowSize(k), nx, out) }); n != 0 {
				t.Errorf("%v nx=%d: %v allocations per call", kk.typ, nx, n)
			}
		}
	}
}

// TestDotKAVX2Shapes checks the wrappers' argument handling: short inputs and too many columns
// panic before the assembly reads anything, and an empty row gives zeros like the Go twins.
func TestDotKAVX2Shapes(t *testing.T) {
	kqNeedAVX2(t)
	const k = 2 * QK_K
	xr := Q8_K.RowSize(k)
	for _, kk := range kqKernels {
		w := kqWeights(t, kk.typ, k, 1, false, 3)
		xs := kqActs(kk.typ, k, MaxCols, xr, false, 4)
		panics := []struct {
			name string
			call func()
		}{
			{"short w", func() { kk.asm(k, w[:len(w)-1], xs, xr, 1, make([]float32, 1)) }},
			{"short last column", func() { kk.asm(k, w, xs[:len(xs)-1], xr, 4, make([]float32, 4)) }},
			{"negative stride", func() { kk.asm(k, w, xs, -1, 2, make([]float32, 2)) }},
			{"short out", func() { kk.asm(k, w, xs, xr, 3, make([]float32, 2)) }},
			{"too many columns", func() { kk.asm(k, w, xs, 0, MaxCols+1, make([]float32, 8)) }},
		}
		for _, p := range panics {
			mustPanic(t, fmt.Sprintf("%v %s", kk.typ, p.name), p.call)
		}
		out := []float32{1, 2, 3}
		kk.asm(0, nil, nil, 0, 2, out)
		if out[0] != 0 || out[1] != 0 || out[2] != 3 {
			t.Errorf("%v k=0: out = %v, want [0 0 3]", kk.typ, out)
		}
	}
}

// kqFuzz compares assembly and Go on arbitrary weight bytes (NaN/Inf f16 scales included: only
// finite Go results are compared) against activation rows built from arbitrary bytes, with the
// activation scale kept in a sane range and the bsums made consistent (the kernels rely on them).
func kqFuzz(f *testing.F, kk kqKernel) {
	bs := kk.typ.TypeSize()
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	f.Add(rnd(bs), rnd(q8_KBytes), uint8(0), uint8(0))
	f.Add(rnd(3*bs), rnd(100), uint8(3), uint8(17))
	f.Add(kqWeights(f, kk.typ, 2*QK_K, 1, false, 5), rnd(2*q8_KBytes), uint8(1), uint8(255))
	// Found by fuzzing: a subnormal activation scale (bytes 30 30 00 00) made d·dx subnormal.
	f.Add(bytes.Repeat([]byte("0"), bs), []byte("00\x00\x00"), uint8(1), uint8(0xa0))
	f.Fuzz(func(t *testing.T, w, xb []byte, nxb, pad uint8) {
		kqNeedAVX2(t)
		nb := min(len(w)/bs, 24)
		if nb == 0 {
			return
		}
		k := nb * QK_K
		nx := int(nxb)%MaxCols + 1
		stride := Q8_K.RowSize(k) + int(pad)
		xs := make([]byte, (nx-1)*stride+Q8_K.RowSize(k))
		if len(xb) > 0 {
			for i := range xs {
				xs[i] = xb[i%len(xb)]
			}
		}
		for j := 0; j < nx; j++ {
			row := xs[j*stride : j*stride+Q8_K.RowSize(k)]
			for b := 0; b < nb; b++ {
				// Activation scales are finite and, unless 0, at least 1e-20 in magnitude, so the
				// products with the f16 scales (>= 6e-8) stay normal floats: with subnormal
				// products both kernels lose relative precision and the tolerance means nothing.
				d := math.Float32frombits(binary.LittleEndian.Uint32(row[b*q8_KBytes:]))
				if a := math.Abs(float64(d)); !(a == 0 || a >= 1e-20 && a <= 1e4) {
					binary.LittleEndian.PutUint32(row[b*q8_KBytes:], math.Float32bits(1))
				}
			}
			kqFixActs(kk.typ, row)
		}
		kqCheck(t, kk, k, w[:nb*bs], xs, stride, nx)
	})
}

func FuzzDotQ4_K(f *testing.F)   { kqFuzz(f, kqKernels[0]) }
func FuzzDotQ6_K(f *testing.F)   { kqFuzz(f, kqKernels[1]) }
func FuzzDotQ5_K(f *testing.F)   { kqFuzz(f, kqKernels[2]) }
func FuzzDotQ2_K(f *testing.F)   { kqFuzz(f, kqKernels[3]) }
func FuzzDotQ3_K(f *testing.F)   { kqFuzz(f, kqKernels[4]) }
func FuzzDotIQ4_XS(f *testing.F) { kqFuzz(f, kqKernels[5]) }

// kqReportGBs adds a GB/s metric: bytes of weights read per second.
func kqReportGBs(b *testing.B, bytesPerOp int) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)/s/1e9, "GB/s")
	}
}

// benchKqImpls runs body as the sub-benchmarks <type>/k=<k>/nx=<nx>/<impl> of kk for nx 1 and
// MaxCols, with impl the assembly kernel (skipped without AVX2) and the Go twin, and reports
// GB/s: bytes (as body returns them) per op.
func benchKqImpls(b *testing.B, kk kqKernel, k int, body func(b *testing.B, dot DotFunc, nx int) (bytes int)) {
	for _, nx := range []int{1, MaxCols} {
		for _, impl := range []string{"asm", "go"} {
			b.Run(fmt.Sprintf("%v/k=%d/nx=%d/%s", kk.typ, k, nx, impl), func(b *testing.B) {
				dot := kk.twin
				if impl == "asm" {
					kqNeedAVX2(b)
					dot = kk.asm
				}
				kqReportGBs(b, body(b, dot, nx))
			})
		}
	}
}

// BenchmarkDotK times one weight row (in cache) against nx columns, assembly vs Go; GB/s counts
// weight bytes, so at nx=4 it is per four dot products.
func BenchmarkDotK(b *testing.B) {
	for _, kk := range kqKernels {
		for _, k := range []int{2048, 5632} {
			w := kqWeights(b, kk.typ, k, 1, false, 6)
			xs := kqActs(kk.typ, k, MaxCols, Q8_K.RowSize(k), false, 7)
			benchKqImpls(b, kk, k, func(b *testing.B, dot DotFunc, nx int) int {
				var out [MaxCols]float32
				b.SetBytes(int64(len(w)))
				b.ReportAllocs()
				for b.Loop() {
					dot(k, w, xs, Q8_K.RowSize(k), nx, out[:])
				}
				return len(w)
			})
		}
	}
}

// BenchmarkDotKStream streams a 64 MiB weight matrix (well beyond the caches) row by row through
// one thread, as a decode step does: nx=1 should run near one core's memory bandwidth.
func BenchmarkDotKStream(b *testing.B) {
	const k, distinct = 2048, 16
	for _, kk := range kqKernels {
		rb := kk.typ.RowSize(k)
		nRows := (64 << 20) / rb
		var w []byte
		benchKqImpls(b, kk, k, func(b *testing.B, dot DotFunc, nx int) int {
			if w == nil {
				src := kqWeights(b, kk.typ, k, distinct, false, 8)
				w = make([]byte, nRows*rb)
				for off := 0; off < len(w); off += len(src) {
					copy(w[off:], src)
				}
			}
			xs := kqActs(kk.typ, k, MaxCols, Q8_K.RowSize(k), false, 9)
			out := make([]float32, MaxCols)
			b.SetBytes(int64(len(w)))
			b.ReportAllocs()
			for b.Loop() {
				for r := 0; r < nRows; r++ {
					dot(k, w[r*rb:(r+1)*rb], xs, Q8_K.RowSize(k), nx, out)
				}
			}
			return len(w)
		})
	}
}
