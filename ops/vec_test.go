package ops

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ubatch/quant"
)

// The exported kernels (assembly on amd64 with AVX2, on arm64 NEON) are compared with the pure-Go
// twins. They sum
// in a different order and use fused multiply-adds, so they agree to float32 rounding:
//
//	dots: |fast - go| <= 1e-5 · Σ|x_i·y_i| + 1e-35
//	axpy: |fast - go| <= 1e-6 · (|y_i| + |a·x_i|) + 1e-35, per element
//
// (float32 rounding is 6e-8 per operation; a wrong lane or a missed element is far outside).
const (
	dotRelTol  = 1e-5
	axpyRelTol = 1e-6
	absTol     = 1e-35
)

var vecLens = []int{0, 1, 7, 8, 9, 15, 16, 31, 32, 33, 40, 63, 64, 65, 96, 127, 128, 129, 1000, 4096}

func randF32s(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	sigma := math.Exp(r.NormFloat64() * 3)
	for i := range x {
		x[i] = float32(r.NormFloat64() * sigma)
	}
	return x
}

func randF16s(r *rand.Rand, n int) []uint16 {
	h := make([]uint16, n)
	for i := range h {
		if r.IntN(2) == 0 {
			h[i] = quant.F32ToF16(float32(r.NormFloat64()))
		} else {
			h[i] = uint16(r.Uint32()) &^ 0x4000 // any finite half, subnormals included
		}
	}
	return h
}

func checkDot(t testing.TB, what string, got, want float32, mag float64) {
	t.Helper()
	if math.IsInf(mag, 0) || math.IsNaN(mag) || mag > 1e36 {
		return
	}
	if d := math.Abs(float64(got) - float64(want)); !(d <= dotRelTol*mag+absTol) {
		t.Fatalf("%s: %v, Go twin %v (|diff| %.3g, Σ|terms| %.3g)", what, got, want, d, mag)
	}
}

func checkAxpy(t testing.TB, what string, got, want []float32, y0 []float32, a float32, x func(int) float32) {
	t.Helper()
	for i := range got {
		mag := math.Abs(float64(y0[i])) + math.Abs(float64(a)*float64(x(i)))
		if math.IsInf(mag, 0) || math.IsNaN(mag) || mag > 1e37 {
			continue
		}
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= axpyRelTol*mag+absTol) {
			t.Fatalf("%s: y[%d] = %v, Go twin %v (y was %v, a·x %v)", what, i, got[i], want[i], y0[i], a*x(i))
		}
	}
}

func absDotF32(x, y []float32) float64 {
	var s float64
	for i := range x {
		s += math.Abs(float64(x[i]) * float64(y[i]))
	}
	return s
}

func absDotF16(x []float32, y []uint16) float64 {
	var s float64
	for i := range x {
		s += math.Abs(float64(x[i]) * float64(quant.F16ToF32(y[i])))
	}
	return s
}

// requireAsm skips a test that compares kernels with their Go twins when asm is false: the
// kernels (named by what) are then the Go twins, and such a comparison cannot fail.
func requireAsm(t testing.TB, asm bool, what string) {
	t.Helper()
	if !asm {
		t.Skip(what + " are the Go twins here (no assembly to compare)")
	}
}

// requireVecAsm is requireAsm for the exported vector kernels.
func requireVecAsm(t testing.TB) {
	t.Helper()
	requireAsm(t, runsAsm(opDotF32), "the exported vector kernels")
}

// checkVecKernels compares the four exported kernels with their Go twins: the dots of x with y
// and with h (len(y), len(h) >= len(x)), and the axpys a·ax and a·h into y0 (len(ax), len(h) >=
// len(y0)), each on a copy of y0.
func checkVecKernels(t testing.TB, name string, x, y []float32, h []uint16, a float32, ax, y0 []float32) {
	t.Helper()
	checkDotF32(t, "DotF32 "+name, x, y)
	checkDotF16(t, "DotF16 "+name, x, h)
	checkAxpyF32(t, "AxpyF32 "+name, a, ax, y0)
	checkAxpyF16(t, "AxpyF16 "+name, a, h, y0)
}

// checkDotF32 compares DotF32 with its Go twin on x and y (len(y) >= len(x)).
func checkDotF32(t testing.TB, what string, x, y []float32) {
	t.Helper()
	checkDot(t, what, DotF32(x, y), dotF32Go(x, y), absDotF32(x, y))
}

// checkDotF16 compares DotF16 with its Go twin on x and h (len(h) >= len(x)).
func checkDotF16(t testing.TB, what string, x []float32, h []uint16) {
	t.Helper()
	checkDot(t, what, DotF16(x, h), dotF16Go(x, h), absDotF16(x, h))
}

// checkAxpyF32 compares AxpyF32 with its Go twin, each adding a·x into a copy of y0 (len(x) >=
// len(y0)).
func checkAxpyF32(t testing.TB, what string, a float32, x, y0 []float32) {
	t.Helper()
	got, want := slices.Clone(y0), slices.Clone(y0)
	AxpyF32(a, x, got)
	axpyF32Go(a, x, want)
	checkAxpy(t, what, got, want, y0, a, func(i int) float32 { return x[i] })
}

// checkAxpyF16 is checkAxpyF32 for AxpyF16, adding a·h (len(h) >= len(y0)).
func checkAxpyF16(t testing.TB, what string, a float32, h []uint16, y0 []float32) {
	t.Helper()
	got, want := slices.Clone(y0), slices.Clone(y0)
	AxpyF16(a, h, got)
	axpyF16Go(a, h, want)
	checkAxpy(t, what, got, want, y0, a, func(i int) float32 { return quant.F16ToF32(h[i]) })
}

func TestVecKernelsMatchGo(t *testing.T) {
	requireVecAsm(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range vecLens {
		for rep := 0; rep < 4; rep++ {
			x, y := randF32s(r, n), randF32s(r, n+r.IntN(3)) // y may be longer than x
			h := randF16s(r, n+r.IntN(3))
			a := float32(r.NormFloat64())
			y0 := randF32s(r, n)
			xl := append(randF32s(r, n), 1e30) // longer x: only len(y) elements are used
			checkVecKernels(t, fmt.Sprintf("n=%d", n), x, y, h, a, xl, y0)
		}
	}
}

// extremeF32s returns n floats mixing ±0, subnormals, and magnitudes from 1e-30 to 1e15 (so that
// products cannot overflow float32).
func extremeF32s(r *rand.Rand, n int) []float32 {
	vals := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-40, 1e-30, 1e15, -1e15, 1, -1}
	x := make([]float32, n)
	for i := range x {
		x[i] = vals[r.IntN(len(vals))] * float32(1+r.Float64())
	}
	return x
}

// extremeF16s returns n halves mixing ±0, subnormals (0x0001-0x03ff), the largest finite
// (±65504) and ordinary values.
func extremeF16s(r *rand.Rand, n int) []uint16 {
	h := make([]uint16, n)
	for i := range h {
		switch r.IntN(4) {
		case 0:
			h[i] = uint16(r.IntN(0x400)) | uint16(r.IntN(2))<<15
		case 1:
			h[i] = 0x7bff | uint16(r.IntN(2))<<15
		default:
			h[i] = quant.F32ToF16(float32(r.NormFloat64()))
		}
	}
	return h
}

// TestVecKernelsUnaligned compares the kernels with their Go twins on slices starting at every
// element offset (unaligned addresses), with ordinary and with extreme values: subnormal and
// largest halves, ±0, huge and tiny floats.
func TestVecKernelsUnaligned(t *testing.T) {
	requireVecAsm(t)
	r := rand.New(rand.NewPCG(11, 12))
	for _, tc := range []struct {
		name string
		f32  func(*rand.Rand, int) []float32
		f16  func(*rand.Rand, int) []uint16
	}{
		{"random", randF32s, randF16s},
		{"extreme", extremeF32s, extremeF16s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []int{8, 16, 24, 40, 64, 72, 128, 136, 1000} {
				for off := 0; off < 4; off++ { // element offsets: 4-byte (F32) and 2-byte (F16) misalignment
					x, y := tc.f32(r, n+off)[off:], tc.f32(r, n+off)[off:]
					h := tc.f16(r, n+off)[off:]
					a := float32(r.NormFloat64())
					checkVecKernels(t, fmt.Sprintf("n=%d off=%d", n, off), x, y, h, a, x, y)
				}
			}
		})
	}
}

// TestVecKernelsLeaveTail checks that the axpy kernels write only y[:len(y)]: the element after
// the slice (in the same backing array) is untouched.
func TestVecKernelsLeaveTail(t *testing.T) {
	for _, n := range []int{8, 16, 24, 33} {
		y := make([]float32, n+1)
		y[n] = 42
		x := make([]float32, n+1)
		h := make([]uint16, n+1)
		for i := range x {
			x[i], h[i] = 1, quant.F32ToF16(1)
		}
		AxpyF32(1, x, y[:n])
		AxpyF16(1, h, y[:n])
		if y[n] != 42 || y[0] != 2 || y[n-1] != 2 {
			t.Errorf("n=%d: y[0]=%v y[n-1]=%v y[n]=%v, want 2, 2, 42", n, y[0], y[n-1], y[n])
		}
	}
}

// TestVecKernelsExact checks the kernels on small integers, where every partial sum is exact in
// float32 whatever the order, so the result must equal the float64 value exactly.
func TestVecKernelsExact(t *testing.T) {
	for _, n := range vecLens {
		x := make([]float32, n)
		y := make([]float32, n)
		h := make([]uint16, n)
		var want float64
		for i := range x {
			x[i] = float32(i%13 - 6)
			y[i] = float32(i%7 - 3)
			h[i] = quant.F32ToF16(y[i])
			want += float64(x[i]) * float64(y[i])
		}
		if got := DotF32(x, y); float64(got) != want {
			t.Errorf("DotF32 n=%d: %v, want %v", n, got, want)
		}
		if got := DotF16(x, h); float64(got) != want {
			t.Errorf("DotF16 n=%d: %v, want %v", n, got, want)
		}
		acc := append([]float32(nil), x...)
		acc16 := append([]float32(nil), x...)
		AxpyF32(2, y, acc)
		AxpyF16(2, h, acc16)
		for i := range acc {
			if w := x[i] + 2*y[i]; acc[i] != w || acc16[i] != w {
				t.Fatalf("Axpy n=%d: y[%d] = %v (F32) %v (F16), want %v", n, i, acc[i], acc16[i], w)
			}
		}
	}
}

func TestVecKernelsNoAlloc(t *testing.T) {
	x, y := make([]float32, 100), make([]float32, 100)
	h := make([]uint16, 100)
	n := testing.AllocsPerRun(20, func() {
		DotF32(x, y)
		DotF16(x, h)
		AxpyF32(1, x, y)
		AxpyF16(1, h, y)
	})
	if n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// f32sFrom reads little-endian float32s from b, replacing Inf/NaN by finite values.
func f32sFrom(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	for i := range x {
		v := binary.LittleEndian.Uint32(b[4*i:])
		if v&0x7f800000 == 0x7f800000 {
			v &^= 0x40000000
		}
		x[i] = math.Float32frombits(v)
	}
	return x
}

// f16sFrom reads little-endian halves from b, replacing Inf/NaN by finite values.
func f16sFrom(b []byte) []uint16 {
	h := make([]uint16, len(b)/2)
	for i := range h {
		h[i] = binary.LittleEndian.Uint16(b[2*i:])
		if h[i]&0x7c00 == 0x7c00 {
			h[i] &^= 0x4000
		}
	}
	return h
}

func addVecSeeds(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 3, 8, 40, 130} {
		b := make([]byte, 6*n+4)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		f.Add(b, float32(0.5))
	}
}

// fuzzSplit splits data into n float32s for x and the rest for y (F32: n floats, F16: n halves).
func fuzzSplit(data []byte, half bool) (x []float32, rest []byte) {
	per := 8
	if half {
		per = 6
	}
	n := len(data) / per
	return f32sFrom(data[:4*n]), data[4*n:]
}

// fuzzVec runs a vector fuzz target, body, on addVecSeeds' seeds where the kernels have
// assembly to compare.
func fuzzVec(f *testing.F, body func(t *testing.T, data []byte, a float32)) {
	addVecSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, a float32) {
		requireVecAsm(t)
		body(t, data, a)
	})
}

func FuzzDotF32(f *testing.F) {
	fuzzVec(f, func(t *testing.T, data []byte, _ float32) {
		x, rest := fuzzSplit(data, false)
		checkDotF32(t, "DotF32", x, f32sFrom(rest))
	})
}

func FuzzDotF16(f *testing.F) {
	fuzzVec(f, func(t *testing.T, data []byte, _ float32) {
		x, rest := fuzzSplit(data, true)
		checkDotF16(t, "DotF16", x, f16sFrom(rest))
	})
}

func FuzzAxpyF32(f *testing.F) {
	fuzzVec(f, func(t *testing.T, data []byte, a float32) {
		x, rest := fuzzSplit(data, false)
		checkAxpyF32(t, "AxpyF32", finiteOr1(a), x, f32sFrom(rest)[:len(x)])
	})
}

func FuzzAxpyF16(f *testing.F) {
	fuzzVec(f, func(t *testing.T, data []byte, a float32) {
		y0, rest := fuzzSplit(data, true)
		checkAxpyF16(t, "AxpyF16", finiteOr1(a), f16sFrom(rest)[:len(y0)], y0)
	})
}

// BenchmarkVec measures each kernel (the exported one, assembly on amd64, and the Go twin) at
// attention head sizes and a long vector. MB/s counts the bytes of both inputs.
func BenchmarkVec(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{64, 128, 4096} {
		x, y := randF32s(r, n), randF32s(r, n)
		h := randF16s(r, n)
		var sink float32
		impls := []struct {
			name         string
			dot32        func(x, y []float32) float32
			dot16        func(x []float32, y []uint16) float32
			axpy32       func(a float32, x, y []float32)
			axpy16       func(a float32, x []uint16, y []float32)
			bytes32, b16 int64
		}{
			{"fast", DotF32, DotF16, AxpyF32, AxpyF16, int64(8 * n), int64(6 * n)},
			{"go", dotF32Go, dotF16Go, axpyF32Go, axpyF16Go, int64(8 * n), int64(6 * n)},
		}
		for _, im := range impls {
			b.Run(fmt.Sprintf("DotF32/%s/n=%d", im.name, n), func(b *testing.B) {
				b.SetBytes(im.bytes32)
				b.ReportAllocs()
				for b.Loop() {
					sink += im.dot32(x, y)
				}
			})
			b.Run(fmt.Sprintf("DotF16/%s/n=%d", im.name, n), func(b *testing.B) {
				b.SetBytes(im.b16)
				b.ReportAllocs()
				for b.Loop() {
					sink += im.dot16(x, h)
				}
			})
			b.Run(fmt.Sprintf("AxpyF32/%s/n=%d", im.name, n), func(b *testing.B) {
				b.SetBytes(im.bytes32)
				b.ReportAllocs()
				for b.Loop() {
					im.axpy32(1e-3, x, y)
				}
			})
			b.Run(fmt.Sprintf("AxpyF16/%s/n=%d", im.name, n), func(b *testing.B) {
				b.SetBytes(im.b16)
				b.ReportAllocs()
				for b.Loop() {
					im.axpy16(1e-3, h, y)
				}
			})
		}
		_ = sink
	}
}
