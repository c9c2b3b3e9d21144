package ops

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// SwiGLU and SoftmaxInPlace (assembly on amd64 with AVX2/FMA) are compared with the pure-Go twins
// swigluGo and softmaxGo. Both compute e^x to within 3e-7 relative (see TestExpNeg and
// TestExpAVX2), flush it to 0 below expCutoff at exactly the same inputs, and round differently
// in the few operations around it, so:
//
//	SwiGLU: |fast - go| <= 1e-6·|go| + 2^-147·(1 + |up|), per element. The absolute term covers
//	        gate·sigmoid underflowing to a subnormal (absolute error 2^-150) before the
//	        multiplication by up; results beyond ±1e37 are only checked for NaN.
//	softmax: the two normalisers sum in different orders, so the outputs are compared after
//	        dividing by the output at the maximum (exactly 1/sum in both):
//	        |fast[i]/fast[j] - go[i]/go[j]| <= 1e-6·go[i]/go[j], per element (zeros must match);
//	        |Σ fast - 1| <= (n/16 + 16)·2^-24 (the assembly keeps 16 partial sums; (n + 2)·2^-24
//	        without it);
//	        |fast[j]/go[j] - 1| <= 1e-6 + (n + n/16 + 16)·2^-24 (the twin adds sequentially).
const (
	swigluRelTol  = 1e-6
	softmaxRelTol = 1e-6
)

var actLens = []int{0, 1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 64, 100, 1000, 5632, 32000}

// wideF32s returns n finite values over wide magnitudes: mostly normal variates of a random
// scale, with ±0, subnormals, huge values and values near the exponential's cutoffs mixed in.
func wideF32s(r *rand.Rand, n int) []float32 {
	special := []float32{
		0, float32(math.Copysign(0, -1)), 1e-45, -1e-45, 1e-40, -3e-39, 1.1754944e-38,
		1e30, -1e30, math.MaxFloat32, -math.MaxFloat32, 3e38,
		expCutoff, -expCutoff, math.Nextafter32(expCutoff, -100), math.Nextafter32(-expCutoff, 100),
		87, -87, 88.5, -88.5, 89, -89, 104, -104, 200, -200,
	}
	x := make([]float32, n)
	sigma := math.Exp(r.NormFloat64() * 3)
	for i := range x {
		switch k := r.IntN(16); {
		case k == 0:
			x[i] = special[r.IntN(len(special))]
		case k == 1:
			x[i] = float32(r.NormFloat64() * 100)
		default:
			x[i] = float32(r.NormFloat64() * sigma)
		}
	}
	return x
}

func checkSwiGLU(t testing.TB, what string, got, want, gate, up []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d results, Go twin %d", what, len(got), len(want))
	}
	for i := range got {
		if math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: dst[%d] = NaN for gate %v, up %v", what, i, gate[i], up[i])
		}
		if math.Abs(float64(want[i])) > 1e37 || math.Abs(float64(gate[i])*float64(up[i])) > 1e37 {
			continue
		}
		tol := swigluRelTol*math.Abs(float64(want[i])) + 0x1p-147*(1+math.Abs(float64(up[i])))
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= tol) {
			t.Fatalf("%s: dst[%d] = %v, Go twin %v (gate %v, up %v, |diff| %.3g)", what, i, got[i], want[i], gate[i], up[i], d)
		}
	}
}

// runSwiGLU checks SwiGLU against swigluGo on gate and up, both into a separate dst and in place
// (dst == gate, as the model calls it); the two must agree bit for bit.
func runSwiGLU(t testing.TB, what string, gate, up []float32) {
	t.Helper()
	got := make([]float32, len(gate)+1)
	got[len(gate)] = 42 // dst may be longer: only len(gate) elements are written
	want := make([]float32, len(gate))
	SwiGLU(got, gate, append(up[:len(gate):len(gate)], 1e30)) // up may be longer
	swigluGo(want, gate, up)
	if got[len(gate)] != 42 {
		t.Fatalf("%s: wrote past len(gate)", what)
	}
	got = got[:len(gate)]
	checkSwiGLU(t, what, got, want, gate, up)
	alias := append([]float32(nil), gate...)
	SwiGLU(alias, alias, up)
	for i := range alias {
		if math.Float32bits(alias[i]) != math.Float32bits(got[i]) {
			t.Fatalf("%s: in place dst[%d] = %v, separate dst %v", what, i, alias[i], got[i])
		}
	}
}

// requireActAsm skips tests that compare SwiGLU and SoftmaxInPlace with their Go twins when
// they are the Go twins (off amd64, or without AVX2/FMA): such a comparison cannot fail.
func requireActAsm(t testing.TB) {
	t.Helper()
	requireAsm(t, runsAsm(opSwiGLU) && runsAsm(opSoftmax), "SwiGLU and SoftmaxInPlace")
}

func TestSwiGLUMatchesGo(t *testing.T) {
	requireActAsm(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range actLens {
		for rep := range 4 {
			runSwiGLU(t, fmt.Sprintf("n=%d rep=%d", n, rep), wideF32s(r, n), wideF32s(r, n))
		}
	}
}

// TestSwiGLUCases checks exact results where they are known, each value in every lane of a
// vector long enough for the assembly plus a tail.
func TestSwiGLUCases(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	inf := float32(math.Inf(1))
	tests := []struct {
		name     string
		gate, up float32
		want     float32
	}{
		{name: "zero gate", gate: 0, up: 5, want: 0},
		{name: "negative zero gate", gate: negZero, up: 5, want: negZero},
		{name: "one", gate: 1, up: 1, want: float32(1 / (1 + math.Exp(-1)))},
		{name: "minus one", gate: -1, up: 2, want: float32(-2 / (1 + math.Exp(1)))},
		{name: "large gate passes up through", gate: 1e30, up: 3, want: 3e30},
		{name: "gate beyond the cutoff", gate: 61, up: -0.5, want: -30.5},
		{name: "very negative gate", gate: -1e30, up: 3, want: negZero},
		{name: "very negative gate, negative up", gate: -1e30, up: -3, want: 0},
		{name: "extreme gate and up", gate: -math.MaxFloat32, up: math.MaxFloat32, want: negZero},
		{name: "overflow", gate: math.MaxFloat32, up: math.MaxFloat32, want: inf},
		{name: "just inside the cutoff", gate: -59.5, up: 1, want: float32(-59.5 * math.Exp(-59.5) / (1 + math.Exp(-59.5)))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const n = 8*3 + 5
			gate, up := make([]float32, n), make([]float32, n)
			for i := range gate {
				gate[i], up[i] = tc.gate, tc.up
			}
			SwiGLU(gate, gate, up)
			for i, got := range gate {
				d := math.Abs(float64(got) - float64(tc.want))
				if math.Float32bits(got) != math.Float32bits(tc.want) && !(d <= 1e-6*math.Abs(float64(tc.want))) {
					t.Fatalf("dst[%d] = %v, want %v", i, got, tc.want)
				}
			}
		})
	}
}

// softmaxOf returns the fast and the Go results for x.
func softmaxOf(x []float32) (fast, slow []float32) {
	fast = append([]float32(nil), x...)
	slow = append([]float32(nil), x...)
	SoftmaxInPlace(fast)
	softmaxGo(slow)
	return fast, slow
}

func checkSoftmax(t testing.TB, what string, x, got, want []float32) {
	t.Helper()
	n := len(x)
	j := 0
	for i, v := range x {
		if v > x[j] {
			j = i
		}
	}
	if math.IsInf(float64(x[j]), -1) {
		return // all -Inf: no distribution (NaN in both)
	}
	u := 0x1p-24
	rho := float64(got[j]) / float64(want[j])
	if tol := 1e-6 + float64(n+n/16+16)*u; !(math.Abs(rho-1) <= tol) {
		t.Fatalf("%s: normalisers differ by %.3g (got[%d] = %v, Go twin %v)", what, rho-1, j, got[j], want[j])
	}
	var sum float64
	for i := range got {
		g, w := float64(got[i]), rho*float64(want[i])
		if !(math.Abs(g-w) <= softmaxRelTol*w) {
			t.Fatalf("%s: out[%d] = %v, Go twin %v normalised to %v (x %v, max %v)", what, i, got[i], want[i], w, x[i], x[j])
		}
		sum += g
	}
	terms := n/16 + 16
	if !runsAsm(opSoftmax) {
		terms = n + 2 // the Go twin sums sequentially
	}
	if tol := float64(terms) * u; !(math.Abs(sum-1) <= tol) {
		t.Fatalf("%s: outputs sum to 1%+.3g", what, sum-1)
	}
}

// logitsLike returns n values as softmax sees them: a spread of a few units to hundreds, a
// random offset, and some -Inf (masked) entries.
func logitsLike(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	spread := math.Exp(r.NormFloat64() * 2)
	offset := r.NormFloat64() * 100
	for i := range x {
		x[i] = float32(offset + r.NormFloat64()*spread)
		if r.IntN(8) == 0 {
			x[i] = float32(math.Inf(-1))
		}
	}
	return x
}

func TestSoftmaxMatchesGo(t *testing.T) {
	requireActAsm(t)
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range actLens {
		if n == 0 {
			continue // x must be non-empty
		}
		for rep := range 4 {
			for _, in := range []struct {
				name string
				x    []float32
			}{
				{name: "wide", x: wideF32s(r, n)},
				{name: "logits", x: logitsLike(r, n)},
			} {
				what := fmt.Sprintf("%s n=%d rep=%d", in.name, n, rep)
				got, want := softmaxOf(in.x)
				checkSoftmax(t, what, in.x, got, want)
			}
		}
	}
}

// TestSoftmaxCases checks special inputs where the result is known exactly.
func TestSoftmaxCases(t *testing.T) {
	inf := float32(math.Inf(-1))
	tests := []struct {
		name string
		x    []float32
		want []float32 // nil: only compared with the Go twin
	}{
		{name: "one element", x: []float32{-3}, want: []float32{1}},
		{name: "one element, huge", x: []float32{-3e38}, want: []float32{1}},
		{name: "all equal", x: fill(40, 2.5), want: fill(40, 1.0/40)},
		{name: "all equal, 8", x: fill(8, -7), want: fill(8, 1.0/8)},
		{name: "masked", x: []float32{inf, 0, inf, inf, 0, inf, inf, inf, inf, inf, inf, inf, inf, inf, inf, 0, inf},
			want: []float32{0, 1.0 / 3, 0, 0, 1.0 / 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.0 / 3, 0}},
		{name: "one finite among -Inf", x: append(fill(31, inf), 5), want: append(fill(31, 0), 1)},
		{name: "beyond the cutoff", x: []float32{0, -60.001, -61, -1e30, 0, -100, -3e38, 0, -60.001}, want: []float32{1.0 / 3, 0, 0, 0, 1.0 / 3, 0, 0, 1.0 / 3, 0}},
		{name: "extremes", x: []float32{3e38, -3e38, 3e38, -3e38, 0, 0, 0, 0, 1}, want: []float32{0.5, 0, 0.5, 0, 0, 0, 0, 0, 0}},
		{name: "at the cutoff", x: append(fill(16, -60), 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, want := softmaxOf(tc.x)
			checkSoftmax(t, "vs Go twin", tc.x, got, want)
			for i := range tc.want {
				if got[i] != tc.want[i] {
					t.Fatalf("out[%d] = %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func fill(n int, v float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = v
	}
	return x
}

func TestActNoAlloc(t *testing.T) {
	gate, up, x := make([]float32, 100), make([]float32, 100), make([]float32, 100)
	n := testing.AllocsPerRun(20, func() {
		SwiGLU(gate, gate, up)
		SoftmaxInPlace(x)
	})
	if n != 0 {
		t.Errorf("%v allocations", n)
	}
}

func FuzzSwiGLU(f *testing.F) {
	requireActAsm(f)
	addVecSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, _ float32) {
		gate, rest := fuzzSplit(data, false)
		up := f32sFrom(rest)[:len(gate)]
		runSwiGLU(t, "fuzz", gate, up)
	})
}

// FuzzSoftmax reads x from data; bit i%64 of masked sets x[i] to -Inf.
func FuzzSoftmax(f *testing.F) {
	requireActAsm(f)
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 5, 8, 17, 40, 130} {
		b := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(r.NormFloat64()*10)))
		}
		f.Add(b, r.Uint64()&r.Uint64())
	}
	f.Fuzz(func(t *testing.T, data []byte, masked uint64) {
		x := f32sFrom(data)
		if len(x) == 0 {
			return
		}
		for i := range x {
			if masked>>(i%64)&1 != 0 {
				x[i] = float32(math.Inf(-1))
			}
		}
		got, want := softmaxOf(x)
		checkSoftmax(t, "fuzz", x, got, want)
	})
}

// BenchmarkSwiGLU measures the exported function (assembly on amd64) and the Go twin (into a
// separate dst: in place, repeated calls would drive the values to 0 or Inf). MB/s counts the
// bytes read and written (12 per element).
func BenchmarkSwiGLU(b *testing.B) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{2048 * 16, 32000} {
		gate, up := randF32s(r, n), randF32s(r, n)
		dst := make([]float32, n)
		for _, im := range []struct {
			name string
			f    func(dst, gate, up []float32)
		}{{"fast", SwiGLU}, {"go", swigluGo}, {"oai", func(dst, gate, up []float32) { SwiGLUOAI(dst, gate, up, 1.702, 7) }}} {
			b.Run(fmt.Sprintf("%s/n=%d", im.name, n), func(b *testing.B) {
				b.SetBytes(int64(12 * n))
				b.ReportAllocs()
				for b.Loop() {
					im.f(dst, gate, up)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/elem")
			})
		}
	}
}

// BenchmarkSoftmax measures the exported function (assembly on amd64) and the Go twin on a row of
// logits, then on its own output (values in [0, 1], so no entry is flushed). MB/s counts one read
// and one write of each element.
func BenchmarkSoftmax(b *testing.B) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, n := range []int{2048 * 16, 32000} {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(r.NormFloat64() * 5)
		}
		x := make([]float32, n)
		for _, im := range []struct {
			name string
			f    func(x []float32)
		}{{"fast", SoftmaxInPlace}, {"go", softmaxGo}} {
			b.Run(fmt.Sprintf("%s/n=%d", im.name, n), func(b *testing.B) {
				b.SetBytes(int64(8 * n))
				b.ReportAllocs()
				copy(x, src)
				for b.Loop() {
					im.f(x)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/elem")
			})
		}
	}
}

// TestSoftmaxSink checks SoftmaxSinkInPlace against the float64 formula e^x[i] / (e^sink +
// Σ e^x[j]) and its Go twin, and that a -Inf sink is SoftmaxInPlace to the bit.
func TestSoftmaxSink(t *testing.T) {
	inf := float32(math.Inf(-1))
	r := rand.New(rand.NewPCG(33, 34))
	tests := []struct {
		name string
		x    []float32
		sink float32
		want []float32 // nil: the float64 formula
	}{
		{name: "two equal and a sink", x: []float32{0, 0}, sink: 0, want: []float32{1.0 / 3, 1.0 / 3}},
		{name: "sink dwarfs", x: fill(9, -100), sink: 100, want: fill(9, 0)},
		{name: "sink negligible", x: []float32{5, 5}, sink: -100, want: []float32{0.5, 0.5}},
		{name: "masked with a sink", x: append(fill(15, inf), 0), sink: 0, want: append(fill(15, 0), 0.5)},
		{name: "all masked", x: fill(10, inf), sink: 1, want: fill(10, 0)},
		{name: "random 8", x: randNormal(r, 8), sink: 0.5},
		{name: "random 37", x: randNormal(r, 37), sink: -1.5},
		{name: "random 100, large sink", x: randNormal(r, 100), sink: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := append([]float32(nil), tc.x...)
			SoftmaxSinkInPlace(got, tc.sink)
			twin := append([]float32(nil), tc.x...)
			softmaxSinkGo(twin, tc.sink)
			want := tc.want
			if want == nil {
				mx, sum := float64(tc.sink), 0.0
				for _, v := range tc.x {
					mx = max(mx, float64(v))
				}
				sum = math.Exp(float64(tc.sink) - mx)
				for _, v := range tc.x {
					sum += math.Exp(float64(v) - mx)
				}
				for _, v := range tc.x {
					want = append(want, float32(math.Exp(float64(v)-mx)/sum))
				}
			}
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-6 || math.IsNaN(float64(got[i])) {
					t.Fatalf("out[%d] = %v, want %v", i, got[i], want[i])
				}
				if d := math.Abs(float64(got[i] - twin[i])); d > 1e-6 {
					t.Fatalf("out[%d] = %v, Go twin %v", i, got[i], twin[i])
				}
			}
			plain := append([]float32(nil), tc.x...)
			withInf := append([]float32(nil), tc.x...)
			if tc.x[0] != inf {
				SoftmaxInPlace(plain)
				SoftmaxSinkInPlace(withInf, inf)
				for i := range plain {
					if math.Float32bits(plain[i]) != math.Float32bits(withInf[i]) {
						t.Fatalf("sink -Inf: out[%d] = %v, SoftmaxInPlace %v", i, withInf[i], plain[i])
					}
				}
			}
		})
	}
}
