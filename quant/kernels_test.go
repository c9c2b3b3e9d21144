//go:build amd64 || arm64

package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"ubatch/internal/cpu"
)

// The assembly dot kernels of every variant of this architecture (asmVariants, asmTypes in
// kernels_amd64_test.go and kernels_arm64_test.go) are checked against their pure-Go twins. Both
// compute the same sum of the same products (the integer block sums exactly), only in a
// different order and with fused multiply-adds, so they may differ by float32 rounding. The
// tolerance is
//
//	|asm - go| <= asmRelTol * Σ|w_i·x_i| + asmAbsTol
//
// with Σ|w_i·x_i| taken over the dequantized weight and activation rows (float64; for the types
// whose scaled and min terms are summed separately and may cancel, Σ|x_i|·(|d·sc_i·q_i| +
// |dmin·m_i|)): a relative 1e-5 of the magnitude of the terms, far above float32 rounding for the
// sizes tested (about 6e-8 per addition times the square root of the number of additions) and far
// below any real slip (a wrong lane, nibble, block or scale changes the result by a sizable
// fraction of Σ|terms|). The absolute part only matters for subnormal results.
const (
	asmRelTol = 1e-5
	asmAbsTol = 1e-35
)

// asmVariant is one set of assembly dot kernels of this architecture.
type asmVariant struct {
	name    string           // what KernelName says when this variant is in use
	skip    string           // why this CPU cannot run the variant; "" when it can
	kernels map[Type]DotFunc // by weight type; the types under test are asmTypes
}

// requireKernel returns v's kernel for typ, skipping when the CPU lacks v or typ is not among
// the asmTypes under test here.
func requireKernel(t testing.TB, v asmVariant, typ Type) DotFunc {
	t.Helper()
	if v.skip != "" {
		t.Skip(v.skip)
	}
	if !slices.Contains(asmTypes, typ) {
		t.Skipf("%v is not among the types with %s kernels tested here", typ, v.name)
	}
	k := v.kernels[typ]
	if k == nil {
		t.Fatalf("no %s kernel registered for %v", v.name, typ)
	}
	return k
}

// forKernels runs f as subtest variant/type for every variant and every type in asmTypes.
func forKernels(t *testing.T, f func(t *testing.T, typ Type, asm DotFunc)) {
	for _, v := range asmVariants() {
		for _, typ := range asmTypes {
			t.Run(v.name+"/"+typ.String(), func(t *testing.T) { f(t, typ, requireKernel(t, v, typ)) })
		}
	}
}

// decodeRow returns the k values of a row of type typ as float64s.
func decodeRow(t testing.TB, typ Type, b []byte, k int) []float64 {
	y := make([]float32, k)
	if err := Dequantize(typ, b[:typ.RowSize(k)], y); err != nil {
		t.Fatal(err)
	}
	r := make([]float64, k)
	for i, v := range y {
		r[i] = float64(v)
	}
	return r
}

// exactDot returns the float64 dot of two decoded rows of one length and its Σ|w_i·x_i|, the
// scale a kernel's rounding error is measured against.
func exactDot(wd, xd []float64) (exact, mag float64) {
	for i := range wd {
		exact += wd[i] * xd[i]
		mag += math.Abs(wd[i] * xd[i])
	}
	return exact, mag
}

// absDot is Σ|w_i·x_i| over the decoded weight row and activation row, or for the types with a
// min (Q4_1, Q5_1, Q4_K, Q5_K: d at offset 0 and dmin or m at 2 of each block; Q2_K: at 80 and
// 82) Σ|x_i|·(|d·sc_i·q_i| + |dmin·m_i|).
func absDot(t testing.TB, typ Type, k int, w, x []byte) float64 {
	xd := decodeRow(t, ActType(typ), x, k)
	var s float64
	dOff, mOff := 0, 2
	if typ == Q2_K {
		dOff, mOff = 80, 82
	}
	if typ == Q4_1 || typ == Q5_1 || typ == Q2_K || typ == Q4_K || typ == Q5_K {
		scaled, mins := decodeZeroed(t, typ, w, k, mOff), decodeZeroed(t, typ, w, k, dOff)
		for i := range xd {
			s += math.Abs(xd[i]) * (math.Abs(scaled[i]) + math.Abs(mins[i]))
		}
		return s
	}
	wd := decodeRow(t, typ, w, k)
	for i := range wd {
		s += math.Abs(wd[i] * xd[i])
	}
	return s
}

// decodeZeroed decodes a weight row of typ with the f16 at offset off of every block set to 0.
func decodeZeroed(t testing.TB, typ Type, w []byte, k, off int) []float64 {
	wc := append([]byte(nil), w[:typ.RowSize(k)]...)
	for o := 0; o+typ.TypeSize() <= len(wc); o += typ.TypeSize() {
		binary.LittleEndian.PutUint16(wc[o+off:], 0)
	}
	return decodeRow(t, typ, wc, k)
}

// compareAsm runs kernel asm and the Go twin on the same inputs and checks every column against
// the tolerance above and that nothing past out[:nx] is written. Columns whose terms overflow
// are only run (no crash); it returns the number of columns compared.
func compareAsm(t testing.TB, asm DotFunc, typ Type, k int, w, x []byte, xStride, nx int) int {
	t.Helper()
	var got, want [MaxCols + 1]float32
	got[nx], want[nx] = -7, -7
	asm(k, w, x, xStride, nx, got[:])
	DotGo(typ)(k, w, x, xStride, nx, want[:])
	if got[nx] != -7 {
		t.Fatalf("%v k=%d nx=%d: wrote past out[:nx]", typ, k, nx)
	}
	xRow := ActType(typ).RowSize(k)
	compared := 0
	for j := 0; j < nx; j++ {
		mag := absDot(t, typ, k, w, x[j*xStride:j*xStride+xRow])
		g, wv := float64(got[j]), float64(want[j])
		if math.IsNaN(mag) || math.IsInf(mag, 0) || mag > 1e36 || math.IsInf(wv, 0) || math.IsNaN(wv) {
			continue // overflowing inputs: only the absence of a crash is checked
		}
		compared++
		if d := math.Abs(g - wv); !(d <= asmRelTol*mag+asmAbsTol) {
			t.Fatalf("%v k=%d nx=%d column %d: asm %v, go %v (|diff| %.3g > %.3g·Σ|terms| %.3g)",
				typ, k, nx, j, got[j], want[j], d, asmRelTol, mag)
		}
	}
	return compared
}

// compareAll is compareAsm for every nx from 1 to MaxCols, each column of which must be compared.
func compareAll(t *testing.T, asm DotFunc, typ Type, k int, w, x []byte, xStride int) {
	t.Helper()
	for nx := 1; nx <= MaxCols; nx++ {
		if n := compareAsm(t, asm, typ, k, w, x, xStride, nx); n != nx {
			t.Fatalf("nx=%d: only %d of %d columns compared", nx, n, nx)
		}
	}
}

// randWeights returns one row of k weights of typ: quantized Gaussians of varied scale, or for
// half of the calls random bytes made valid by sanitizeWeights.
func randWeights(t testing.TB, r *rand.Rand, typ Type, k int) []byte {
	b := make([]byte, typ.RowSize(k))
	if r.IntN(2) == 0 {
		x := make([]float32, k)
		sigma := math.Exp(r.NormFloat64() * 2)
		for i := range x {
			x[i] = float32(r.NormFloat64() * sigma)
		}
		if err := Quantize(typ, x, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	sanitizeWeights(typ, b)
	return b
}

// randActs returns nx activation rows for typ (each k elements of ActType(typ)) with the given
// byte stride; the padding between rows is garbage that must not be read.
func randActs(r *rand.Rand, typ Type, k, nx, stride int) []byte {
	b := make([]byte, (nx-1)*stride+ActType(typ).RowSize(k))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	x := make([]float32, k)
	for j := 0; j < nx; j++ {
		sigma := math.Exp(r.NormFloat64())
		for i := range x {
			x[i] = float32(r.NormFloat64() * sigma)
		}
		QuantizeAct(typ, x, b[j*stride:])
	}
	return b
}

// sanitizeHalf turns an F16 Inf/NaN bit pattern at b into a finite one.
func sanitizeHalf(b []byte) {
	if h := binary.LittleEndian.Uint16(b); h&0x7c00 == 0x7c00 {
		binary.LittleEndian.PutUint16(b, h&^0x4000)
	}
}

// sanitizeWeights makes arbitrary bytes a valid weight row of typ: see sanitizeRow.
func sanitizeWeights(typ Type, b []byte) { sanitizeRow(typ, b, false) }

// sanitizeActs makes arbitrary bytes a valid activation row for typ's kernels (a row of
// ActType(typ)): see sanitizeRow.
func sanitizeActs(typ Type, b []byte) { sanitizeRow(ActType(typ), b, true) }

// sanitizeRow makes every block scale of a row of typ finite (the f16 d of the 32-element
// types, d and dmin or m where there is one, the f32 d of Q8_K), F16 values finite and F32/BF16
// values within 2^±40 (so that no sum overflows) and, for Q8_0 activations (acts), every quant
// of -128 (never written by QuantizeAct) -127.
func sanitizeRow(typ Type, b []byte, acts bool) {
	for o := 0; o+typ.TypeSize() <= len(b); o += typ.TypeSize() {
		switch typ {
		case F32:
			v := binary.LittleEndian.Uint32(b[o:])
			binary.LittleEndian.PutUint32(b[o:], v&0x807fffff|(127-40+(v>>23&0xff)%81)<<23)
			continue
		case BF16:
			v := uint32(binary.LittleEndian.Uint16(b[o:])) << 16
			v = v&0x807f0000 | (127-40+(v>>23&0xff)%81)<<23
			binary.LittleEndian.PutUint16(b[o:], uint16(v>>16))
			continue
		case F16:
			sanitizeHalf(b[o:])
			continue
		case Q8_K:
			if v := binary.LittleEndian.Uint32(b[o:]); v&0x7f800000 == 0x7f800000 {
				binary.LittleEndian.PutUint32(b[o:], v&^0x40000000)
			}
			continue
		case Q4_1, Q5_1, Q4_K, Q5_K:
			sanitizeHalf(b[o+2:])
		case Q6_K:
			sanitizeHalf(b[o+208:])
			continue
		case Q2_K:
			sanitizeHalf(b[o+80:])
			sanitizeHalf(b[o+82:])
			continue
		case Q3_K:
			sanitizeHalf(b[o+108:])
			continue
		case MXFP4:
			// Every byte is valid; the scale byte is kept at most 2^39 (as the floats within 2^±40),
			// small and subnormal scales (e < 2) included, so that no sum overflows.
			b[o] %= 128 + 40
			continue
		}
		sanitizeHalf(b[o:])
		for i := o + 2; acts && i < o+typ.TypeSize(); i++ {
			if b[i] == 0x80 {
				b[i] = 0x81
			}
		}
	}
}

func TestAsmKernelsMatchGo(t *testing.T) {
	forKernels(t, func(t *testing.T, typ Type, asm DotFunc) {
		// The smallest block count, odd block counts, the model sizes and a large k; float types
		// also get lengths that are not multiples of 8 or 16.
		bs := typ.BlockSize()
		ks := []int{0, bs, 2 * bs, 3 * bs, 5 * bs, 7 * bs, 2048, 2048 + bs, 5632}
		if bs <= 32 {
			ks = append(ks, 33*bs)
		}
		if bs == 1 {
			ks = append(ks, 7, 8, 9, 15, 16, 17, 23, 24, 31, 33, 100, 2047, 2049)
		}
		if !testing.Short() {
			ks = append(ks, 16384)
		}
		r := rand.New(rand.NewPCG(uint64(typ), 1))
		at := ActType(typ)
		for _, k := range ks {
			for nx := 1; nx <= MaxCols; nx++ {
				for rep := 0; rep < 3; rep++ {
					w := randWeights(t, r, typ, k)
					stride := at.RowSize(k) + r.IntN(3)*at.TypeSize() + r.IntN(5)
					x := randActs(r, typ, k, nx, stride)
					if n := compareAsm(t, asm, typ, k, w, x, stride, nx); n != nx {
						t.Fatalf("k=%d nx=%d: only %d of %d columns finite", k, nx, n, nx)
					}
				}
			}
		}
	})
}

// TestAsmKernelsAgainstFloat64 checks the kernels against the exact (float64) dot of the decoded
// rows, independently of the Go twins.
func TestAsmKernelsAgainstFloat64(t *testing.T) {
	forKernels(t, func(t *testing.T, typ Type, asm DotFunc) {
		r := rand.New(rand.NewPCG(uint64(typ), 2))
		bs := max(typ.BlockSize(), 32)
		for _, k := range []int{bs, 3 * bs, 4096, 4096 + 5*bs} {
			w := randWeights(t, r, typ, k)
			xRow := ActType(typ).RowSize(k)
			x := randActs(r, typ, k, MaxCols, xRow)
			var out [MaxCols]float32
			asm(k, w, x, xRow, MaxCols, out[:])
			wd := decodeRow(t, typ, w, k)
			for j := 0; j < MaxCols; j++ {
				exact, mag := exactDot(wd, decodeRow(t, ActType(typ), x[j*xRow:], k))
				if d := math.Abs(float64(out[j]) - exact); d > asmRelTol*mag+asmAbsTol {
					t.Errorf("k=%d column %d: asm %v, exact %v (|diff| %.3g, Σ|terms| %.3g)", k, j, out[j], exact, d, mag)
				}
			}
		}
	})
}

// TestAsmKernelsBounds checks that short inputs panic in the Go wrapper instead of letting the
// assembly read out of bounds, and that nx <= 0 computes nothing.
func TestAsmKernelsBounds(t *testing.T) {
	forKernels(t, func(t *testing.T, typ Type, asm DotFunc) {
		k := 2 * max(typ.BlockSize(), 32)
		rb, xr := typ.RowSize(k), ActType(typ).RowSize(k)
		w, x := make([]byte, rb), make([]byte, 4*xr)
		out := make([]float32, MaxCols+1)
		cases := []struct {
			name string
			f    func()
		}{
			{"short weights", func() { asm(k, w[:rb-1], x, xr, 1, out) }},
			{"short last column", func() { asm(k, w, x[:4*xr-1], xr, 4, out) }},
			{"short out", func() { asm(k, w, x, xr, 3, out[:2]) }},
			{"too many columns", func() { asm(k, w, append(x, x...), xr, MaxCols+1, out) }},
			{"negative stride", func() { asm(k, w, x, -xr, 2, out) }},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { mustPanic(t, c.name, c.f) })
		}
		out[0] = 5
		asm(k, w, x, xr, 0, out)
		if out[0] != 5 {
			t.Errorf("nx=0 wrote out[0]")
		}
	})
}

func TestAsmKernelsNoAlloc(t *testing.T) {
	forKernels(t, func(t *testing.T, typ Type, asm DotFunc) {
		k := 11 * max(typ.BlockSize(), 32)
		if typ.BlockSize() == 1 {
			k += 7 // a tail for the float kernels
		}
		xr := ActType(typ).RowSize(k)
		w := make([]byte, typ.RowSize(k))
		x := make([]byte, MaxCols*xr)
		out := make([]float32, MaxCols)
		if n := testing.AllocsPerRun(20, func() { asm(k, w, x, xr, MaxCols, out) }); n != 0 {
			t.Errorf("%v allocations per call", n)
		}
	})
}

// TestKernelDispatch checks that Kernel hands out the best variant this CPU supports (the last
// of asmVariants that it can run).
func TestKernelDispatch(t *testing.T) {
	var best *asmVariant
	for _, v := range asmVariants() {
		if v.skip == "" {
			best = &v
		}
	}
	if best == nil {
		t.Skip("this CPU runs none of the assembly variants")
	}
	var path cpu.Path
	for p := range cpu.NumPaths {
		if p.String() == best.name {
			path = p
		}
	}
	for _, typ := range asmTypes {
		want := best.name
		if types[typ].kernels.dot[path] == nil {
			want = path.Lower().String() // the float kernels under neon-dp: NEON's
		}
		if got := KernelName(typ); got != want {
			t.Errorf("KernelName(%v) = %q, want %q", typ, got, want)
		}
		if reflect.ValueOf(Kernel(typ)).Pointer() != reflect.ValueOf(best.kernels[typ]).Pointer() {
			t.Errorf("Kernel(%v) is not the %s kernel", typ, best.name)
		}
	}
	t.Logf("dot kernels: %s", best.name)
}

// fuzzDot interprets data as one weight row of typ followed by nx activation rows (stride: row
// size plus pad bytes), sanitized so that scales and floats are finite, and compares the kernel
// of every variant the CPU runs with the Go twin.
func fuzzDot(t *testing.T, typ Type, data []byte, nxb, pad uint8) {
	nx := 1 + int(nxb)%MaxCols
	wb, xb := typ.TypeSize(), ActType(typ).TypeSize()
	nb := max(0, (len(data)-nx*int(pad))/(wb+nx*xb))
	k := nb * typ.BlockSize()
	w := append([]byte(nil), data[:nb*wb]...)
	stride := nb*xb + int(pad)
	x := append([]byte(nil), data[nb*wb:]...)
	need := (nx-1)*stride + nb*xb
	x = x[:min(len(x), need)]
	x = append(x, make([]byte, need-len(x))...)
	sanitizeWeights(typ, w)
	for j := 0; j < nx; j++ {
		sanitizeActs(typ, x[j*stride:j*stride+nb*xb])
	}
	ran := false
	for _, v := range asmVariants() {
		if v.skip == "" && v.kernels[typ] != nil {
			compareAsm(t, v.kernels[typ], typ, k, w, x, stride, nx)
			ran = true
		}
	}
	if !ran {
		t.Skipf("no assembly kernel for %v runs on this CPU", typ)
	}
}

func addFuzzSeeds(f *testing.F, typ Type) {
	r := rand.New(rand.NewPCG(uint64(typ), 3))
	bs := typ.BlockSize()
	for _, k := range []int{bs, 3 * bs, max(256, 8*bs)} {
		for _, nx := range []int{1, 4} {
			w := randWeights(f, r, typ, k)
			x := randActs(r, typ, k, nx, ActType(typ).RowSize(k))
			f.Add(append(w, x...), uint8(nx-1), uint8(0))
		}
	}
	f.Add([]byte{}, uint8(0), uint8(0))
}

// fuzzKernel is the body of the fuzz target of typ's kernels.
func fuzzKernel(f *testing.F, typ Type) {
	addFuzzSeeds(f, typ)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzDot(t, typ, data, nx, pad) })
}

func FuzzDotQ4_0(f *testing.F)   { fuzzKernel(f, Q4_0) }
func FuzzDotQ8_0(f *testing.F)   { fuzzKernel(f, Q8_0) }
func FuzzDotQ5_0(f *testing.F)   { fuzzKernel(f, Q5_0) }
func FuzzDotIQ4_NL(f *testing.F) { fuzzKernel(f, IQ4_NL) }
func FuzzDotMXFP4(f *testing.F)  { fuzzKernel(f, MXFP4) }
func FuzzDotQ4_1(f *testing.F)   { fuzzKernel(f, Q4_1) }
func FuzzDotQ5_1(f *testing.F)   { fuzzKernel(f, Q5_1) }
func FuzzDotF32(f *testing.F)    { fuzzKernel(f, F32) }
func FuzzDotF16(f *testing.F)    { fuzzKernel(f, F16) }
func FuzzDotBF16(f *testing.F)   { fuzzKernel(f, BF16) }
