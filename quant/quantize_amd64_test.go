package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ubatch/internal/cpu"
)

// The AVX2 Q8_0 quantizer must give exactly the bytes of its Go twin quantizeQ8_0Go for every
// input without NaN (see quantize_amd64.go), and the documented bytes for NaN inputs.

func requireQuantAsm(t testing.TB) {
	t.Helper()
	if !cpu.HasAVX2 {
		t.Skip("CPU lacks AVX2/FMA/F16C/BMI2")
	}
}

// q8Guard is the byte written past the blocks to check that nothing there is touched.
const (
	q8Guard    = 0xa5
	q8GuardLen = 40
)

// checkQuantizeQ8_0Asm quantizes src with the Go twin, the AVX2 kernel and the dispatching
// quantizeQ8_0, and requires identical bytes and untouched guard bytes after the blocks.
func checkQuantizeQ8_0Asm(t *testing.T, src []float32) {
	t.Helper()
	nb := len(src) / 32
	n := nb * q8_0Bytes
	want := make([]byte, n)
	quantizeQ8_0Go(src, want)
	for _, impl := range []struct {
		name string
		f    func([]float32, []byte)
	}{
		{"quantizeQ8_0AVX2", quantizeQ8_0AVX2},
		{"quantizeQ8_0", quantizeQ8_0},
	} {
		got := make([]byte, n+q8GuardLen)
		for i := range got {
			got[i] = q8Guard
		}
		impl.f(src, got)
		for i := n; i < len(got); i++ {
			if got[i] != q8Guard {
				t.Fatalf("%s wrote byte %d past the %d blocks", impl.name, i-n, nb)
			}
		}
		if diff := firstQ8Diff(src, got[:n], want); diff != "" {
			t.Fatalf("%s, %d blocks: %s", impl.name, nb, diff)
		}
	}
}

// firstQ8Diff describes the first difference between the Q8_0 rows got and want quantized from
// src, or returns "".
func firstQ8Diff(src []float32, got, want []byte) string {
	for b := 0; (b+1)*q8_0Bytes <= len(want); b++ {
		g, w := got[b*q8_0Bytes:(b+1)*q8_0Bytes], want[b*q8_0Bytes:(b+1)*q8_0Bytes]
		if string(g) == string(w) {
			continue
		}
		gd, wd := binary.LittleEndian.Uint16(g), binary.LittleEndian.Uint16(w)
		if gd != wd {
			return fmt.Sprintf("block %d: scale %#04x, want %#04x (%v)", b, gd, wd, F16ToF32(wd))
		}
		for i := 2; i < q8_0Bytes; i++ {
			if g[i] != w[i] {
				return fmt.Sprintf("block %d (scale %v): quant %d of x = %v (%#08x) is %d, want %d",
					b, F16ToF32(wd), i-2, src[b*32+i-2], math.Float32bits(src[b*32+i-2]), int8(g[i]), int8(w[i]))
			}
		}
	}
	return ""
}

// nanToSubnormal replaces a NaN bit pattern by the same bits with a zero exponent (a subnormal or zero of
// the same sign), keeping arbitrary inputs varied but free of NaN.
func nanToSubnormal(f float32) float32 {
	if f != f {
		return math.Float32frombits(math.Float32bits(f) &^ 0x7f800000)
	}
	return f
}

// q8Inputs generate n floats (a multiple of 32) for the identity test.
var q8Inputs = []struct {
	name string
	gen  func(r *rand.Rand, n int) []float32
}{
	{"gaussian sigma 1", func(r *rand.Rand, n int) []float32 { return q8Gaussian(r, n, 1) }},
	{"gaussian sigma 1e-3", func(r *rand.Rand, n int) []float32 { return q8Gaussian(r, n, 1e-3) }},
	{"gaussian sigma 300", func(r *rand.Rand, n int) []float32 { return q8Gaussian(r, n, 300) }},
	{"gaussian, block scales 2^-140..2^120", func(r *rand.Rand, n int) []float32 {
		x := q8Gaussian(r, n, 1)
		for b := 0; b < n/32; b++ {
			s := float32(math.Ldexp(1, r.IntN(261)-140))
			for i := range x[b*32 : b*32+32] {
				x[b*32+i] *= s
			}
		}
		return x
	}},
	{"zeros of both signs", func(r *rand.Rand, n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			if r.IntN(2) == 0 {
				x[i] = float32(math.Copysign(0, -1))
			}
		}
		return x
	}},
	{"all equal positive", func(r *rand.Rand, n int) []float32 { return q8Fill(n, math.Pi) }},
	{"all equal negative", func(r *rand.Rand, n int) []float32 { return q8Fill(n, -0.7) }},
	{"all equal tiny", func(r *rand.Rand, n int) []float32 { return q8Fill(n, 1e-42) }},
	{"float32 max of both signs", func(r *rand.Rand, n int) []float32 {
		x := q8Fill(n, math.MaxFloat32)
		for i := range x {
			if r.IntN(2) == 0 {
				x[i] = -x[i]
			}
		}
		return x
	}},
	{"huge, near float32 max", func(r *rand.Rand, n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32((r.Float64()*2 - 1) * math.MaxFloat32)
		}
		return x
	}},
	{"subnormal", func(r *rand.Rand, n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = math.Float32frombits(r.Uint32() & 0x807fffff)
		}
		return x
	}},
	{"few-ulp subnormal (d zero or 1/d infinite)", func(r *rand.Rand, n int) []float32 {
		x := make([]float32, n)
		for b := 0; b < n/32; b++ {
			top := uint32(1 + r.IntN(400)) // amax up to 400 ulps: d = amax/127 is 0 to 3 ulps
			for i := range x[b*32 : b*32+32] {
				x[b*32+i] = math.Float32frombits(r.Uint32N(top+1) | r.Uint32()&0x80000000)
			}
		}
		return x
	}},
	{"small normal (d subnormal)", func(r *rand.Rand, n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = math.Float32frombits(uint32(1+r.IntN(12))<<23 | r.Uint32()&0x807fffff)
		}
		return x
	}},
	{"exact ties k+0.5", func(r *rand.Rand, n int) []float32 {
		x := make([]float32, n)
		for b := 0; b < n/32; b++ {
			s := float32(math.Ldexp(1, b%9-4)) // d = s exactly: amax = 127s is a block element
			blk := x[b*32 : b*32+32]
			blk[r.IntN(32)] = 127 * s
			for i := range blk {
				if blk[i] == 0 {
					blk[i] = (float32(r.IntN(254)-127) + 0.5) * s // k+0.5 in [-126.5, 126.5]
				}
			}
			if r.IntN(2) == 0 {
				blk[0] = -blk[0]
			}
		}
		return x
	}},
	{"near ties, d = 3", func(r *rand.Rand, n int) []float32 {
		x := make([]float32, n)
		for b := 0; b < n/32; b++ {
			blk := x[b*32 : b*32+32]
			blk[r.IntN(32)] = -381 // d = 3, id = float32(1/3), so x*id lands next to k+0.5
			for i := range blk {
				if blk[i] == 0 {
					v := (float32(r.IntN(254)-127) + 0.5) * 3
					switch r.IntN(3) {
					case 0:
						v = math.Nextafter32(v, 1000)
					case 1:
						v = math.Nextafter32(v, -1000)
					}
					blk[i] = v
				}
			}
		}
		return x
	}},
	{"products next to ±0.5", func(r *rand.Rand, n int) []float32 {
		// x*id rounds to the float just below 0.5, where trunc(x*id + 0.5) gives 1 (ggml's
		// roundf gives 0), and the exact product lies just below that: a build that fused the
		// multiply and add (GOAMD64=v3 without the Go twin's float32 conversion) would give 0.
		pairs := [][2]uint32{{0x3e99999a, 0x3a9acf37}, {0x429b6666, 0x3e9c9fa4}} // {amax, x}: 0.3, 77.7
		x := make([]float32, n)
		for b := 0; b < n/32; b++ {
			p := pairs[r.IntN(len(pairs))]
			amax, v := math.Float32frombits(p[0]), math.Float32frombits(p[1])
			blk := x[b*32 : b*32+32]
			for i := range blk {
				blk[i] = v * float32(1-2*r.IntN(2))
			}
			blk[r.IntN(32)] = amax * float32(1-2*r.IntN(2))
		}
		return x
	}},
	{"mixed signs, varied magnitudes", func(r *rand.Rand, n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			v := float32(math.Ldexp(r.Float64(), r.IntN(40)-20))
			if i%2 == 1 {
				v = -v
			}
			x[i] = v
		}
		return x
	}},
	{"scales at the f16 boundaries", func(r *rand.Rand, n int) []float32 {
		// d around the largest half (65504), the overflow threshold (65520), the smallest
		// normal half (2^-14) and the subnormal halves (2^-24, and the zero threshold 2^-25).
		bounds := []float64{65504, 65520, 65536, 0x1p-14, 0x1p-24, 0x1p-25, 0x1.8p-25, 0x1p-26}
		x := q8Gaussian(r, n, 0.3)
		for b := 0; b < n/32; b++ {
			amax := float32(bounds[r.IntN(len(bounds))] * 127)
			for range r.IntN(5) {
				if r.IntN(2) == 0 {
					amax = math.Nextafter32(amax, 0)
				} else {
					amax = math.Nextafter32(amax, math.MaxFloat32)
				}
			}
			blk := x[b*32 : b*32+32]
			for i := range blk {
				blk[i] *= amax / 4
				if abs32(blk[i]) > amax {
					blk[i] = 0
				}
			}
			blk[r.IntN(32)] = amax
		}
		return x
	}},
	{"random bits without NaN", func(r *rand.Rand, n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = nanToSubnormal(math.Float32frombits(r.Uint32()))
		}
		return x
	}},
	{"infinities", func(r *rand.Rand, n int) []float32 {
		x := q8Gaussian(r, n, 1)
		for b := 0; b < n/32; b++ {
			if r.IntN(3) > 0 {
				x[b*32+r.IntN(32)] = float32(math.Inf(1 - 2*r.IntN(2)))
			}
		}
		return x
	}},
}

func q8Gaussian(r *rand.Rand, n int, sigma float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * sigma)
	}
	return x
}

func q8Fill(n int, v float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = v
	}
	return x
}

func TestQuantizeQ8_0AVX2(t *testing.T) {
	requireQuantAsm(t)
	for ti, tc := range q8Inputs {
		t.Run(tc.name, func(t *testing.T) {
			for _, nb := range []int{1, 2, 7, 64, 176} {
				r := rand.New(rand.NewPCG(uint64(ti), uint64(nb)))
				checkQuantizeQ8_0Asm(t, tc.gen(r, nb*32))
			}
		})
	}
}

// TestQuantizeQ8_0AVX2Shapes checks the wrapper's handling of lengths: floats past the last
// whole block are ignored, an empty row writes nothing, and a short dst panics before anything is
// written.
func TestQuantizeQ8_0AVX2Shapes(t *testing.T) {
	requireQuantAsm(t)
	tests := []struct {
		name      string
		n, dst    int
		wantPanic bool
	}{
		{"empty", 0, 0, false},
		{"fewer than 32 floats", 31, 0, false},
		{"partial last block ignored", 3*32 + 17, 3 * q8_0Bytes, false},
		{"exact", 5 * 32, 5 * q8_0Bytes, false},
		{"dst one byte short", 2 * 32, 2*q8_0Bytes - 1, true},
		{"dst empty", 32, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := gaussian(3, tc.n, 1)
			dst := make([]byte, tc.dst+q8GuardLen)
			for i := range dst {
				dst[i] = q8Guard
			}
			func() {
				defer func() {
					if p := recover(); (p != nil) != tc.wantPanic {
						t.Errorf("panic %v, want panic %v", p, tc.wantPanic)
					}
				}()
				quantizeQ8_0AVX2(src, dst[:tc.dst])
			}()
			want := make([]byte, len(dst))
			for i := range want {
				want[i] = q8Guard
			}
			if !tc.wantPanic {
				quantizeQ8_0Go(src, want[:tc.dst])
			}
			if string(dst) != string(want) {
				n := min(tc.dst, len(src)/32*q8_0Bytes) / q8_0Bytes * q8_0Bytes
				t.Errorf("bytes differ from the Go twin's (or past the blocks): %s", firstQ8Diff(src, dst[:n], want[:n]))
			}
		})
	}
}

// TestQuantizeQ8_0AVX2NaN checks the kernel's documented NaN behaviour: NaN elements do not take
// part in the block maximum, and each quantizes to -128. Expected bytes are the Go twin's for the
// row with NaNs replaced by zeros, with 0x80 at the NaN positions.
func TestQuantizeQ8_0AVX2NaN(t *testing.T) {
	requireQuantAsm(t)
	nan := float32(math.NaN())
	negNaN := math.Float32frombits(0xffc00001)
	sNaN := math.Float32frombits(0x7f800001)
	tests := []struct {
		name string
		set  func(x []float32, r *rand.Rand)
	}{
		{"one NaN per block, at every position", func(x []float32, r *rand.Rand) {
			for b := 0; b < len(x)/32; b++ {
				x[b*32+b%32] = nan
			}
		}},
		{"negative NaN, no other NaN in the block", func(x []float32, r *rand.Rand) {
			for b := 0; b < len(x)/32; b++ {
				x[b*32+r.IntN(32)] = negNaN
			}
		}},
		{"first and last element NaN", func(x []float32, r *rand.Rand) {
			for b := 0; b < len(x)/32; b++ {
				x[b*32], x[b*32+31] = sNaN, nan
			}
		}},
		{"whole block NaN", func(x []float32, r *rand.Rand) {
			for i := range x[:32] {
				x[i] = nan
			}
		}},
		{"random NaN bits", func(x []float32, r *rand.Rand) {
			for i := range x {
				if r.IntN(4) == 0 {
					x[i] = math.Float32frombits(r.Uint32() | 0x7f800001)
				}
			}
		}},
	}
	for ti, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const nb = 32
			r := rand.New(rand.NewPCG(uint64(ti), 77))
			x := q8Gaussian(r, nb*32, 2)
			tc.set(x, r)
			clean := make([]float32, len(x))
			for i, v := range x {
				if v == v {
					clean[i] = v
				}
			}
			want := make([]byte, nb*q8_0Bytes)
			quantizeQ8_0Go(clean, want)
			for i, v := range x {
				if v != v {
					want[i/32*q8_0Bytes+2+i%32] = 0x80
				}
			}
			got := make([]byte, len(want))
			quantizeQ8_0AVX2(x, got)
			if diff := firstQ8Diff(x, got, want); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// f16Range is the float32 bit patterns lo, lo+1, ..., lo+n-1.
type f16Range struct{ lo, n uint32 }

// f16EveryMantissa returns the ranges holding every finite float32 >= 0 with the given exponents.
func f16EveryMantissa(exps ...uint32) []f16Range {
	var rs []f16Range
	for _, e := range exps {
		rs = append(rs, f16Range{e << 23, 1 << 23})
	}
	return rs
}

// f16RoundingBits returns, for each float32 exponent e from first to last (within 101-113, where
// F32ToF16 drops s = 126-e bits of the 24-bit significand, 13 for the smallest normal half),
// ranges holding every pattern of the low min(s, 23) mantissa bits under the upper mantissa bits
// (if any) 0, 1, all ones but the last and all ones: both parities of the kept part and the
// carry out of it. That is every mantissa for the exponents up to 105.
func f16RoundingBits(first, last uint32) []f16Range {
	var rs []f16Range
	for e := first; e <= last; e++ {
		low := min(126-e, 23)
		u := uint32(1) << (23 - low) // number of upper patterns
		for hi := uint32(0); hi < u; hi++ {
			if u > 4 && hi > 1 && hi < u-2 {
				continue
			}
			rs = append(rs, f16Range{e<<23 | hi<<low, 1 << low})
		}
	}
	return rs
}

// TestF32ToF16AVX2 checks the kernel's scale conversion (VCVTPS2PH, round to nearest even: the
// TOHALF macro of simd_amd64.h, which f32ToF16sF16C runs too) against F32ToF16. The float32 exponents of the
// half-subnormal range and around it, where the rounding position moves, are tried with every
// pattern of the dropped bits (see f16RoundingBits), those of the overflow threshold with every
// mantissa, and every other exponent (both signs) with all 2^13 patterns of the bits that a
// normal half drops, under upper mantissas that give both parities and the carry into the
// exponent. (A one-off run over every float32 from +0 to +Inf also agreed; it takes about 12 s.)
// -short skips the two slow cases.
func TestF32ToF16AVX2(t *testing.T) {
	requireQuantAsm(t)
	lowBits := func(sign uint32) []f16Range {
		var rs []f16Range
		for e := uint32(0); e < 0xff; e++ {
			for _, hi := range []uint32{0, 1, 2, 0x155, 0x2aa, 0x3fe, 0x3ff} {
				rs = append(rs, f16Range{sign | e<<23 | hi<<13, 1 << 13})
			}
		}
		return append(rs, f16Range{sign | 0x7f800000, 1}) // Inf; d is never NaN
	}
	r := rand.New(rand.NewPCG(5, 6))
	var random []f16Range
	for range 1 << 16 {
		random = append(random, f16Range{math.Float32bits(nanToSubnormal(math.Float32frombits(r.Uint32()))), 1})
	}
	tests := []struct {
		name   string
		ranges []f16Range
		slow   bool // skipped with -short
	}{
		// F32ToF16 flushes exponents below 102 to zero, rounds 102-112 to half subnormals
		// (dropping 14 to 24 bits of the 24-bit significand), and overflows to Inf from 143 on
		// (and from 142 when rounding up carries out of the mantissa).
		{"half-subnormal exponents 101-113, every rounding pattern", f16RoundingBits(101, 113), true},
		{"overflow exponents 142-143, every mantissa", f16EveryMantissa(142, 143), true},
		{"every exponent, dropped-bit patterns", lowBits(0), false},
		{"every exponent, dropped-bit patterns, negative", lowBits(0x80000000), false},
		{"random, both signs", random, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.slow && testing.Short() {
				t.Skip("millions of values")
			}
			const chunk = 1 << 14
			var src [chunk]float32
			var dst [chunk]uint16
			bad := 0
			for _, rg := range tc.ranges {
				for done := uint32(0); done < rg.n && bad < 10; {
					n := min(rg.n-done, chunk)
					for i := range n {
						src[i] = math.Float32frombits(rg.lo + done + i)
					}
					m := (n + 15) &^ 15 // f32ToF16sF16C converts groups of 16
					clear(src[n:m])
					f32ToF16sF16C(&dst[0], &src[0], int(m))
					for i, f := range src[:n] {
						if want := F32ToF16(f); dst[i] != want && bad < 10 {
							bad++
							t.Errorf("VCVTPS2PH(%v = %#08x) = %#04x, F32ToF16 %#04x", f, math.Float32bits(f), dst[i], want)
						}
					}
					done += n
				}
			}
		})
	}
}

func TestQuantizeQ8_0AVX2NoAlloc(t *testing.T) {
	requireQuantAsm(t)
	x := gaussian(9, 2048, 1)
	dst := make([]byte, Q8_0.RowSize(len(x)))
	tests := []struct {
		name string
		f    func([]float32, []byte)
	}{
		{"quantizeQ8_0AVX2", quantizeQ8_0AVX2},
		{"quantizeQ8_0", quantizeQ8_0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(20, func() { tc.f(x, dst) }); n != 0 {
				t.Errorf("%v allocations per call", n)
			}
		})
	}
}

// FuzzQuantizeQ8_0Asm reads arbitrary bytes as float32s (NaN patterns replaced by nanToSubnormal, the
// row zero-padded to whole blocks) and requires the kernel's bytes to equal the Go twin's.
func FuzzQuantizeQ8_0Asm(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 192})
	f.Add([]byte{0xff, 0xff, 0x7f, 0x7f, 1, 0, 0, 0, 0, 0, 0x80, 0x7f})
	f.Add([]byte{1, 0, 0, 0, 0x7f, 0, 0, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		requireQuantAsm(t)
		nv := len(data) / 4
		x := make([]float32, (nv+31)/32*32)
		for i := 0; i < nv; i++ {
			x[i] = nanToSubnormal(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
		}
		want := make([]byte, len(x)/32*q8_0Bytes)
		got := make([]byte, len(want))
		quantizeQ8_0Go(x, want)
		quantizeQ8_0AVX2(x, got)
		if diff := firstQ8Diff(x, got, want); diff != "" {
			t.Fatal(diff)
		}
	})
}

// BenchmarkQuantizeQ8_0 quantizes one activation row of k floats per call with the AVX2 kernel
// and the Go twin; GB/s counts the input floats' bytes.
func BenchmarkQuantizeQ8_0(b *testing.B) {
	impls := []struct {
		name string
		f    func([]float32, []byte)
	}{
		{"asm", quantizeQ8_0AVX2},
		{"go", quantizeQ8_0Go},
	}
	for _, k := range []int{2048, 5632} {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("k=%d/%s", k, impl.name), func(b *testing.B) {
				if impl.name == "asm" {
					requireQuantAsm(b)
				}
				x := gaussian(1, k, 1)
				dst := make([]byte, Q8_0.RowSize(k))
				for b.Loop() {
					impl.f(x, dst)
				}
				b.ReportMetric(float64(4*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
