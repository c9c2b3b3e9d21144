package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// The assembly kernels are checked against their pure-Go twins. Both compute the same sum of the
// same products (exactly the same integer block sums for Q4_0/Q8_0), only in a different order
// and with fused multiply-adds, so they may differ by float32 rounding. The tolerance is
//
//	|asm - go| <= asmRelTol * Σ|w_i·x_i| + asmAbsTol
//
// with Σ|w_i·x_i| taken over the dequantized weight and activation rows (float64; for Q4_1 and
// Q5_1, whose two terms d·l and m are summed separately, Σ|x_i|·(|d·l_i| + |m|)): a relative
// 1e-5 of the magnitude of the terms, far above float32 rounding for the sizes tested (about
// 6e-8 per addition times the square root of the number of additions) and far below any real slip
// (a wrong lane, block or scale changes the result by a sizable fraction of Σ|terms|). The
// absolute part only matters for subnormal results.
const (
	asmRelTol = 1e-5
	asmAbsTol = 1e-35
)

// asmTypes are the weight types with AVX2 kernels in dot_q8_amd64.go, dot_q32_amd64.go and
// dot_f_amd64.go.
var asmTypes = []Type{Q4_0, Q8_0, F16, F32, BF16, Q5_0, IQ4_NL, Q4_1, Q5_1}

func requireAsm(t testing.TB, typ Type) DotFunc {
	t.Helper()
	if !hasAVX2 {
		t.Skip("CPU lacks AVX2/FMA/F16C/BMI2")
	}
	k := asmKernels[typ]
	if k == nil {
		t.Fatalf("no assembly kernel registered for %v", typ)
	}
	return k
}

// decodeRow returns the k values of a row of type typ as float64s (F32 activations included).
func decodeRow(t testing.TB, typ Type, b []byte, k int) []float64 {
	y := make([]float32, k)
	if typ == F32 {
		for i := range y {
			y[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	} else if err := Dequantize(typ, b[:typ.RowSize(k)], y); err != nil {
		t.Fatal(err)
	}
	r := make([]float64, k)
	for i, v := range y {
		r[i] = float64(v)
	}
	return r
}

// absDot is Σ|w_i·x_i| over the decoded weight row and activation row, or for the types with a
// min (Q4_1, Q5_1: d at offset 0 and m at 2 of each block) Σ|x_i|·(|d·l_i| + |m|).
func absDot(t testing.TB, typ Type, k int, w, x []byte) float64 {
	xd := decodeRow(t, ActType(typ), x, k)
	var s float64
	if typ == Q4_1 || typ == Q5_1 {
		scaled, mins := decodeZeroed(t, typ, w, k, 2), decodeZeroed(t, typ, w, k, 0)
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

// compareAsm runs the assembly kernel and the Go twin on the same inputs and checks every column
// against the tolerance above, that nothing past out[:nx] is written, and (when exact) that the
// results are finite wherever the Go results are. It returns the number of columns compared.
func compareAsm(t testing.TB, typ Type, k int, w, x []byte, xStride, nx int) int {
	t.Helper()
	asm := requireAsm(t, typ)
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

// randWeights returns one row of k weights of typ: quantized Gaussians of varied scale, or for
// half of the calls raw random bytes (with finite scales / finite floats).
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
	switch typ {
	case F32, BF16:
		// Random bits with the exponent limited to 2^±40, so that sums cannot overflow.
		for i := 0; i < k; i++ {
			v := r.Uint32()&0x807fffff | uint32(127-40+r.IntN(81))<<23
			if typ == F32 {
				binary.LittleEndian.PutUint32(b[4*i:], v)
			} else {
				binary.LittleEndian.PutUint16(b[2*i:], uint16(v>>16))
			}
		}
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

// sanitizeHalf turns an F16 Inf/NaN bit pattern into a finite one.
func sanitizeHalf(b []byte) {
	if h := binary.LittleEndian.Uint16(b); h&0x7c00 == 0x7c00 {
		binary.LittleEndian.PutUint16(b, h&^0x4000)
	}
}

// sanitizeWeights makes every scale (and min) of a 32-element block type or value (floats) of a
// weight row finite.
func sanitizeWeights(typ Type, b []byte) {
	switch typ {
	case Q4_0, Q8_0, Q5_0, IQ4_NL:
		for o := 0; o+typ.TypeSize() <= len(b); o += typ.TypeSize() {
			sanitizeHalf(b[o:])
		}
	case Q4_1, Q5_1:
		for o := 0; o+typ.TypeSize() <= len(b); o += typ.TypeSize() {
			sanitizeHalf(b[o:])
			sanitizeHalf(b[o+2:])
		}
	case F16:
		for o := 0; o+2 <= len(b); o += 2 {
			sanitizeHalf(b[o:])
		}
	case BF16:
		for o := 0; o+2 <= len(b); o += 2 {
			if h := binary.LittleEndian.Uint16(b[o:]); h&0x7f80 == 0x7f80 {
				binary.LittleEndian.PutUint16(b[o:], h&^0x4000)
			}
		}
	case F32:
		sanitizeF32(b)
	}
}

func sanitizeF32(b []byte) {
	for o := 0; o+4 <= len(b); o += 4 {
		if v := binary.LittleEndian.Uint32(b[o:]); v&0x7f800000 == 0x7f800000 {
			binary.LittleEndian.PutUint32(b[o:], v&^0x40000000)
		}
	}
}

// sanitizeActs makes arbitrary activation bytes valid for typ's kernels: finite scales and quants
// in [-127, 127] (what QuantizeAct writes) for Q8_0, finite floats for F32.
func sanitizeActs(typ Type, b []byte) {
	if ActType(typ) != Q8_0 {
		sanitizeF32(b)
		return
	}
	for o := 0; o+q8_0Bytes <= len(b); o += q8_0Bytes {
		sanitizeHalf(b[o:])
		for i := o + 2; i < o+q8_0Bytes; i++ {
			if b[i] == 0x80 {
				b[i] = 0x81
			}
		}
	}
}

// testKs returns the row lengths to test for typ: the smallest block count, odd block counts,
// the model sizes and a large k; float types also get lengths that are not multiples of 8 or 16.
func testKs(typ Type) []int {
	bs := typ.BlockSize()
	ks := []int{0, bs, 2 * bs, 3 * bs, 5 * bs, 7 * bs, 33 * bs, 2048, 2048 + bs, 5632, 16384}
	if bs == 1 {
		ks = append(ks, 7, 8, 9, 15, 16, 17, 23, 24, 31, 33, 100, 2047, 2049)
	}
	return ks
}

func TestAsmKernelsMatchGo(t *testing.T) {
	for _, typ := range asmTypes {
		t.Run(typ.String(), func(t *testing.T) {
			requireAsm(t, typ)
			r := rand.New(rand.NewPCG(uint64(typ), 1))
			for _, k := range testKs(typ) {
				for nx := 1; nx <= MaxCols; nx++ {
					for rep := 0; rep < 3; rep++ {
						w := randWeights(t, r, typ, k)
						xRow := ActType(typ).RowSize(k)
						stride := xRow + r.IntN(3)*ActType(typ).TypeSize() + r.IntN(5)
						x := randActs(r, typ, k, nx, stride)
						if n := compareAsm(t, typ, k, w, x, stride, nx); n != nx {
							t.Fatalf("k=%d nx=%d: only %d of %d columns finite", k, nx, n, nx)
						}
					}
				}
			}
		})
	}
}

// TestAsmKernelsAgainstFloat64 checks the kernels against the exact (float64) dot of the decoded
// rows, independently of the Go twins.
func TestAsmKernelsAgainstFloat64(t *testing.T) {
	for _, typ := range asmTypes {
		t.Run(typ.String(), func(t *testing.T) {
			asm := requireAsm(t, typ)
			r := rand.New(rand.NewPCG(uint64(typ), 2))
			for _, k := range []int{32, 96, 4096, 4096 + 160} {
				w := randWeights(t, r, typ, k)
				xRow := ActType(typ).RowSize(k)
				x := randActs(r, typ, k, MaxCols, xRow)
				var out [MaxCols]float32
				asm(k, w, x, xRow, MaxCols, out[:])
				wd := decodeRow(t, typ, w, k)
				for j := 0; j < MaxCols; j++ {
					xd := decodeRow(t, ActType(typ), x[j*xRow:], k)
					var exact, mag float64
					for i := range wd {
						exact += wd[i] * xd[i]
						mag += math.Abs(wd[i] * xd[i])
					}
					if d := math.Abs(float64(out[j]) - exact); d > asmRelTol*mag+asmAbsTol {
						t.Errorf("k=%d column %d: asm %v, exact %v (|diff| %.3g, Σ|terms| %.3g)", k, j, out[j], exact, d, mag)
					}
				}
			}
		})
	}
}

// TestAsmKernelsSpecialValues feeds the extremes of each format: Q8_0 weights of -128 and
// 127 against activation quants of ±127, Q4_0 nibbles 0 and 15, the largest f16 scales, and
// subnormal f16/bf16 weights.
func TestAsmKernelsSpecialValues(t *testing.T) {
	const k = 96
	fill := func(typ Type, wq, xq byte, wd, xd uint16) ([]byte, []byte) {
		w := make([]byte, typ.RowSize(k))
		x := make([]byte, MaxCols*q8_0Bytes*k/32)
		for o := 0; o < len(w); o += typ.TypeSize() {
			binary.LittleEndian.PutUint16(w[o:], wd)
			for i := o + 2; i < o+typ.TypeSize(); i++ {
				w[i] = wq
			}
		}
		for o := 0; o < len(x); o += q8_0Bytes {
			binary.LittleEndian.PutUint16(x[o:], xd)
			for i := o + 2; i < o+q8_0Bytes; i++ {
				x[i] = xq
			}
		}
		return w, x
	}
	for _, tc := range []struct {
		typ    Type
		wq, xq byte
		wd, xd uint16
	}{
		{Q8_0, 0x80, 0x81, 0x3c00, 0x3c00}, // -128 * -127
		{Q8_0, 0x80, 0x7f, 0x7bff, 0x7bff}, // -128 * 127, largest scales
		{Q8_0, 0x7f, 0x81, 0x0001, 0x3c00}, // subnormal scale
		{Q4_0, 0x00, 0x7f, 0x3c00, 0xbc00}, // nibbles 0 (-8)
		{Q4_0, 0xff, 0x81, 0x7bff, 0x3c00}, // nibbles 15 (7)
		{Q4_0, 0x0f, 0x7f, 0x3c00, 0x3c00}, // mixed
	} {
		w, x := fill(tc.typ, tc.wq, tc.xq, tc.wd, tc.xd)
		for nx := 1; nx <= MaxCols; nx++ {
			compareAsm(t, tc.typ, k, w, x, Q8_0.RowSize(k), nx)
		}
	}
	r := rand.New(rand.NewPCG(7, 7))
	for _, typ := range []Type{F16, BF16} {
		w := make([]byte, 2*k)
		for i := 0; i < k; i++ {
			binary.LittleEndian.PutUint16(w[2*i:], uint16(r.IntN(0x400))|uint16(i&1)<<15) // subnormals
		}
		x := randActs(r, typ, k, MaxCols, 4*k)
		for nx := 1; nx <= MaxCols; nx++ {
			compareAsm(t, typ, k, w, x, 4*k, nx)
		}
	}
}

// TestAsmKernelsBounds checks that short inputs panic in the Go wrapper instead of letting the
// assembly read out of bounds, and that nx <= 0 computes nothing.
func TestAsmKernelsBounds(t *testing.T) {
	for _, typ := range asmTypes {
		asm := requireAsm(t, typ)
		const k = 64
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
			t.Run(fmt.Sprintf("%v/%s", typ, c.name), func(t *testing.T) {
				defer func() {
					if recover() == nil {
						t.Errorf("no panic")
					}
				}()
				c.f()
			})
		}
		out[0] = 5
		asm(k, w, x, xr, 0, out)
		if out[0] != 5 {
			t.Errorf("%v: nx=0 wrote out[0]", typ)
		}
	}
}

func TestAsmKernelsNoAlloc(t *testing.T) {
	for _, typ := range asmTypes {
		asm := requireAsm(t, typ)
		for _, k := range []int{256, 256 + 3*32 + 7*typ.BlockSize()%32} { // with a tail for every type
			w := make([]byte, typ.RowSize(k))
			x := make([]byte, MaxCols*ActType(typ).RowSize(k))
			out := make([]float32, MaxCols)
			if n := testing.AllocsPerRun(20, func() { asm(k, w, x, ActType(typ).RowSize(k), MaxCols, out) }); n != 0 {
				t.Errorf("%v k=%d: %v allocations per call", typ, k, n)
			}
		}
	}
}

// TestKernelDispatch checks that Kernel hands out the assembly kernels on AVX2 machines.
func TestKernelDispatch(t *testing.T) {
	for _, typ := range asmTypes {
		requireAsm(t, typ)
		if KernelName(typ) != "avx2" {
			t.Errorf("KernelName(%v) = %q", typ, KernelName(typ))
		}
	}
}

// fuzzDot interprets data as one weight row of typ followed by nx activation rows (stride: row
// size plus pad bytes), sanitized so that scales and floats are finite, and compares the assembly
// kernel with the Go twin.
func fuzzDot(t *testing.T, typ Type, data []byte, nxb, pad uint8) {
	if !hasAVX2 {
		t.Skip("no AVX2")
	}
	nx := 1 + int(nxb)%MaxCols
	wb, xb := typ.TypeSize(), ActType(typ).RowSize(typ.BlockSize())
	nb := (len(data) - nx*int(pad)) / (wb + nx*xb)
	if nb < 0 {
		nb = 0
	}
	k := nb * typ.BlockSize()
	w := append([]byte(nil), data[:nb*wb]...)
	stride := nb*xb + int(pad)
	x := append([]byte(nil), data[nb*wb:]...)
	x = x[:min(len(x), (nx-1)*stride+nb*xb)]
	if len(x) < (nx-1)*stride+nb*xb {
		x = append(x, make([]byte, (nx-1)*stride+nb*xb-len(x))...)
	}
	sanitizeWeights(typ, w)
	for j := 0; j < nx; j++ {
		sanitizeActs(typ, x[j*stride:j*stride+nb*xb])
	}
	compareAsm(t, typ, k, w, x, stride, nx)
}

func addFuzzSeeds(f *testing.F, typ Type) {
	r := rand.New(rand.NewPCG(uint64(typ), 3))
	for _, k := range []int{typ.BlockSize(), 3 * typ.BlockSize(), 256} {
		for _, nx := range []int{1, 4} {
			w := randWeights(f, r, typ, k)
			x := randActs(r, typ, k, nx, ActType(typ).RowSize(k))
			f.Add(append(w, x...), uint8(nx-1), uint8(0))
		}
	}
	f.Add([]byte{}, uint8(0), uint8(0))
}

func FuzzDotQ4_0(f *testing.F) {
	addFuzzSeeds(f, Q4_0)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzDot(t, Q4_0, data, nx, pad) })
}

func FuzzDotQ8_0(f *testing.F) {
	addFuzzSeeds(f, Q8_0)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzDot(t, Q8_0, data, nx, pad) })
}

func FuzzDotF16(f *testing.F) {
	addFuzzSeeds(f, F16)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzDot(t, F16, data, nx, pad) })
}

func FuzzDotBF16(f *testing.F) {
	addFuzzSeeds(f, BF16)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzDot(t, BF16, data, nx, pad) })
}

func FuzzDotF32(f *testing.F) {
	addFuzzSeeds(f, F32)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzDot(t, F32, data, nx, pad) })
}

func FuzzDotQ5_0(f *testing.F) {
	addFuzzSeeds(f, Q5_0)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzDot(t, Q5_0, data, nx, pad) })
}

func FuzzDotIQ4_NL(f *testing.F) {
	addFuzzSeeds(f, IQ4_NL)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzDot(t, IQ4_NL, data, nx, pad) })
}

func FuzzDotQ4_1(f *testing.F) {
	addFuzzSeeds(f, Q4_1)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzDot(t, Q4_1, data, nx, pad) })
}

func FuzzDotQ5_1(f *testing.F) {
	addFuzzSeeds(f, Q5_1)
	f.Fuzz(func(t *testing.T, data []byte, nx, pad uint8) { fuzzDot(t, Q5_1, data, nx, pad) })
}
