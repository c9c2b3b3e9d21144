package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// The NEON kernels are checked against their pure-Go twins, on every variant the CPU supports
// ("neon-dp" needs the dot-product extension: under qemu-user run with QEMU_CPU=max). The integer
// block sums are exact in both; the float sums differ in order and fusion, so the tolerance is
//
//	|asm - go| <= neonRelTol * Σ|w_i·x_i| + neonAbsTol
//
// over the dequantized rows: far above float32 rounding for the sizes tested, far below any
// real slip (a wrong lane, nibble, block or scale moves the result by a sizable fraction of
// Σ|terms|). (These helpers mirror kernels_amd64_test.go, which is not built here.)
const (
	neonRelTol = 1e-5
	neonAbsTol = 1e-35
)

// neonTypes are the weight types with NEON kernels (dot_q8_arm64.go, dot_q4k_arm64.go,
// dot_q5k_arm64.go, dot_q6k_arm64.go, dot_f_arm64.go).
var neonTypes = []Type{Q4_0, Q8_0, Q5_0, IQ4_NL, Q4_1, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, F32, F16, BF16}

// requireNEON returns variant v's kernel for typ, skipping when the CPU lacks the variant.
func requireNEON(t testing.TB, v string, typ Type) DotFunc {
	t.Helper()
	if v == "neon-dp" && !hasDotProd {
		t.Skip("CPU lacks the dot-product extension (ASIMDDP); under qemu-user set QEMU_CPU=max")
	}
	k := neonKernels[v][typ]
	if k == nil {
		t.Fatalf("no %s kernel registered for %v", v, typ)
	}
	return k
}

// decodeF64 returns the k values of a row of type typ as float64s.
func decodeF64(t testing.TB, typ Type, b []byte, k int) []float64 {
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

// termMagnitude is Σ|w_i·x_i| over the decoded rows, or for the types with a min (Q4_1, Q5_1,
// Q4_K, Q5_K: d at offset 0 and dmin or m at 2 of each block; Q2_K: at 80 and 82; the scaled
// and the min terms are summed separately and may cancel) Σ|x_i|·(|d·sc_i·q_i| + |dmin·m_i|).
func termMagnitude(t testing.TB, typ Type, k int, w, x []byte) float64 {
	xd := decodeF64(t, ActType(typ), x, k)
	var s float64
	dOff, mOff := 0, 2
	if typ == Q2_K {
		dOff, mOff = 80, 82
	}
	if typ == Q4_1 || typ == Q5_1 || typ == Q2_K || typ == Q4_K || typ == Q5_K {
		scaled, mins := decodeWithout(t, typ, w, k, mOff), decodeWithout(t, typ, w, k, dOff)
		for i := range xd {
			s += math.Abs(xd[i]) * (math.Abs(scaled[i]) + math.Abs(mins[i]))
		}
		return s
	}
	wd := decodeF64(t, typ, w, k)
	for i := range wd {
		s += math.Abs(wd[i] * xd[i])
	}
	return s
}

// decodeWithout decodes a weight row of typ with the f16 at offset off of every block set to 0.
func decodeWithout(t testing.TB, typ Type, w []byte, k, off int) []float64 {
	wc := append([]byte(nil), w[:typ.RowSize(k)]...)
	for o := 0; o+typ.TypeSize() <= len(wc); o += typ.TypeSize() {
		binary.LittleEndian.PutUint16(wc[o+off:], 0)
	}
	return decodeF64(t, typ, wc, k)
}

// compareNEON runs kernel asm and the Go twin on the same inputs and checks every column against
// the tolerance and that nothing past out[:nx] is written. Columns whose terms overflow are only
// run (no crash); it returns the number of columns compared.
func compareNEON(t testing.TB, asm DotFunc, typ Type, k int, w, x []byte, xStride, nx int) int {
	t.Helper()
	var got, want [MaxCols + 1]float32
	got[nx], want[nx] = -7, -7
	asm(k, w, x, xStride, nx, got[:])
	DotGo(typ)(k, w, x, xStride, nx, want[:])
	if got[nx] != -7 {
		t.Fatalf("%v k=%d nx=%d: wrote past out[:nx]", typ, k, nx)
	}
	compared := 0
	for j := 0; j < nx; j++ {
		mag := termMagnitude(t, typ, k, w, x[j*xStride:])
		g, wv := float64(got[j]), float64(want[j])
		if math.IsNaN(mag) || math.IsInf(mag, 0) || mag > 1e36 || math.IsInf(wv, 0) || math.IsNaN(wv) {
			continue
		}
		compared++
		if d := math.Abs(g - wv); !(d <= neonRelTol*mag+neonAbsTol) {
			t.Fatalf("%v k=%d nx=%d column %d: asm %v, go %v (|diff| %.3g > %.3g·Σ|terms| %.3g)",
				typ, k, nx, j, got[j], want[j], d, neonRelTol, mag)
		}
	}
	return compared
}

// finiteHalf turns an F16 Inf/NaN bit pattern at b into a finite one.
func finiteHalf(b []byte) {
	if h := binary.LittleEndian.Uint16(b); h&0x7c00 == 0x7c00 {
		binary.LittleEndian.PutUint16(b, h&^0x4000)
	}
}

// sanitizeBlocks makes every block scale of a row of typ finite (the f16 d of the 32-element
// types, d and dmin or m where there is one, the f32 d of Q8_K), F16 values finite and F32/BF16
// values within 2^±40 (so that no sum overflows) and, for Q8_0 activations (acts), every quant
// of -128 (never written by QuantizeAct) -127.
func sanitizeBlocks(typ Type, b []byte, acts bool) {
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
			finiteHalf(b[o:])
			continue
		case Q8_K:
			if v := binary.LittleEndian.Uint32(b[o:]); v&0x7f800000 == 0x7f800000 {
				binary.LittleEndian.PutUint32(b[o:], v&^0x40000000)
			}
			continue
		case Q4_1, Q5_1, Q4_K, Q5_K:
			finiteHalf(b[o+2:])
		case Q6_K:
			finiteHalf(b[o+208:])
			continue
		case Q2_K:
			finiteHalf(b[o+80:])
			finiteHalf(b[o+82:])
			continue
		case Q3_K:
			finiteHalf(b[o+108:])
			continue
		}
		finiteHalf(b[o:])
		for i := o + 2; acts && i < o+typ.TypeSize(); i++ {
			if b[i] == 0x80 {
				b[i] = 0x81
			}
		}
	}
}

// neonWeights returns one row of k weights of typ: quantized Gaussians of varied scale, or for
// half of the calls random bytes with finite scales.
func neonWeights(t testing.TB, r *rand.Rand, typ Type, k int) []byte {
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
	sanitizeBlocks(typ, b, false)
	return b
}

// neonActs returns nx activation rows for typ (k elements of ActType(typ)) with the given byte
// stride; the padding between rows is garbage that must not be read.
func neonActs(r *rand.Rand, typ Type, k, nx, stride int) []byte {
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

// forNEON runs f for every variant and NEON type as subtests.
func forNEON(t *testing.T, f func(t *testing.T, v string, typ Type, asm DotFunc)) {
	for _, v := range []string{"neon", "neon-dp"} {
		for _, typ := range neonTypes {
			t.Run(v+"/"+typ.String(), func(t *testing.T) { f(t, v, typ, requireNEON(t, v, typ)) })
		}
	}
}

func TestNEONKernelsMatchGo(t *testing.T) {
	forNEON(t, func(t *testing.T, v string, typ Type, asm DotFunc) {
		bs := typ.BlockSize()
		ks := []int{0, bs, 2 * bs, 3 * bs, 5 * bs, 7 * bs, 2048, 2048 + bs, 5632}
		if bs == 32 {
			ks = append(ks, 33*bs)
		}
		if bs == 1 {
			ks = append(ks, 8, 9, 15, 16, 17, 23, 31, 33, 100, 2047)
		}
		if !testing.Short() {
			ks = append(ks, 16384)
		}
		r := rand.New(rand.NewPCG(uint64(typ), uint64(len(v))))
		for _, k := range ks {
			for nx := 1; nx <= MaxCols; nx++ {
				for rep := 0; rep < 3; rep++ {
					w := neonWeights(t, r, typ, k)
					at := ActType(typ)
					stride := at.RowSize(k) + r.IntN(3)*at.TypeSize() + r.IntN(5)
					x := neonActs(r, typ, k, nx, stride)
					if n := compareNEON(t, asm, typ, k, w, x, stride, nx); n != nx {
						t.Fatalf("k=%d nx=%d: only %d of %d columns finite", k, nx, n, nx)
					}
				}
			}
		}
	})
}

// TestNEONKernelsAgainstFloat64 checks the kernels against the exact (float64) dot of the
// decoded rows, independently of the Go twins.
func TestNEONKernelsAgainstFloat64(t *testing.T) {
	forNEON(t, func(t *testing.T, v string, typ Type, asm DotFunc) {
		r := rand.New(rand.NewPCG(uint64(typ), 2))
		for _, k := range []int{256, 768, 4096 + 256} {
			w := neonWeights(t, r, typ, k)
			xRow := ActType(typ).RowSize(k)
			x := neonActs(r, typ, k, MaxCols, xRow)
			var out [MaxCols]float32
			asm(k, w, x, xRow, MaxCols, out[:])
			wd := decodeF64(t, typ, w, k)
			for j := 0; j < MaxCols; j++ {
				xd := decodeF64(t, ActType(typ), x[j*xRow:], k)
				var exact, mag float64
				for i := range wd {
					exact += wd[i] * xd[i]
					mag += math.Abs(wd[i] * xd[i])
				}
				if d := math.Abs(float64(out[j]) - exact); d > neonRelTol*mag+neonAbsTol {
					t.Errorf("k=%d column %d: asm %v, exact %v (|diff| %.3g, Σ|terms| %.3g)", k, j, out[j], exact, d, mag)
				}
			}
		}
	})
}

// TestNEONKernelsSpecialValues feeds the extremes: Q8_0 weights of -128 and 127 against
// activation quants of ±127 and even -128 (exact in both integer paths), Q4_0 nibbles 0 and 15,
// the largest and subnormal f16 scales.
func TestNEONKernelsSpecialValues(t *testing.T) {
	const k = 96
	fill := func(typ Type, wq, xq byte, wd, xd uint16) ([]byte, []byte) {
		w := make([]byte, typ.RowSize(k))
		x := make([]byte, MaxCols*Q8_0.RowSize(k))
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
		name   string
		typ    Type
		wq, xq byte
		wd, xd uint16
	}{
		{"q8 -128*-127", Q8_0, 0x80, 0x81, 0x3c00, 0x3c00},
		{"q8 -128*-128", Q8_0, 0x80, 0x80, 0x3c00, 0x3c00},
		{"q8 -128*127 largest scales", Q8_0, 0x80, 0x7f, 0x7bff, 0x7bff},
		{"q8 subnormal scale", Q8_0, 0x7f, 0x81, 0x0001, 0x3c00},
		{"q4 nibbles 0", Q4_0, 0x00, 0x7f, 0x3c00, 0xbc00},
		{"q4 nibbles 15", Q4_0, 0xff, 0x81, 0x7bff, 0x3c00},
		{"q4 mixed", Q4_0, 0x0f, 0x7f, 0x3c00, 0x3c00},
		{"q4 -128 acts", Q4_0, 0xf0, 0x80, 0x3c00, 0x3c00},
	} {
		for _, v := range []string{"neon", "neon-dp"} {
			t.Run(v+"/"+tc.name, func(t *testing.T) {
				asm := requireNEON(t, v, tc.typ)
				w, x := fill(tc.typ, tc.wq, tc.xq, tc.wd, tc.xd)
				for nx := 1; nx <= MaxCols; nx++ {
					if n := compareNEON(t, asm, tc.typ, k, w, x, Q8_0.RowSize(k), nx); n != nx {
						t.Fatalf("nx=%d: only %d of %d columns compared", nx, n, nx)
					}
				}
			})
		}
	}
}

// TestNEONKernelsBounds checks that short inputs panic in the Go wrapper instead of letting the
// assembly read out of bounds, and that nx <= 0 computes nothing.
func TestNEONKernelsBounds(t *testing.T) {
	forNEON(t, func(t *testing.T, v string, typ Type, asm DotFunc) {
		k := 2 * typ.BlockSize()
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
			t.Run(c.name, func(t *testing.T) {
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
			t.Errorf("nx=0 wrote out[0]")
		}
	})
}

func TestNEONKernelsNoAlloc(t *testing.T) {
	forNEON(t, func(t *testing.T, v string, typ Type, asm DotFunc) {
		k := 11 * typ.BlockSize()
		xr := ActType(typ).RowSize(k)
		w := make([]byte, typ.RowSize(k))
		x := make([]byte, MaxCols*xr)
		out := make([]float32, MaxCols)
		if n := testing.AllocsPerRun(20, func() { asm(k, w, x, xr, MaxCols, out) }); n != 0 {
			t.Errorf("%v allocations per call", n)
		}
	})
}

// TestNEONDispatch checks that Kernel hands out the best variant this CPU supports.
func TestNEONDispatch(t *testing.T) {
	want := "neon"
	if hasDotProd {
		want = "neon-dp"
	}
	for _, typ := range neonTypes {
		if got := KernelName(typ); got != want {
			t.Errorf("KernelName(%v) = %q, want %q", typ, got, want)
		}
		if asmKernels[typ] == nil {
			t.Errorf("no kernel registered for %v", typ)
		}
	}
	t.Logf("arm64 dot kernels: %s (ASIMDDP %v)", want, hasDotProd)
}

// TestNEONKQuantSpecialValues feeds K-quant extremes: every level, scale and min at its maximum
// (all bytes 0xff: for Q6_K levels 31 and scales -1) or zero, or mixed nibbles, against Q8_K
// activation quants of ±127 and -128 with their true bsums.
func TestNEONKQuantSpecialValues(t *testing.T) {
	const k = 2 * QK_K
	for _, typ := range []Type{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS} {
		for _, tc := range []struct {
			name string
			wq   byte
			xq   int8
		}{
			{"all 0xff, +127", 0xff, 127},
			{"all 0xff, -128", 0xff, -128},
			{"zero, -127", 0x00, -127},
			{"mixed nibbles, -128", 0x0f, -128},
			{"0x80, +127", 0x80, 127},
		} {
			w := make([]byte, typ.RowSize(k))
			for o := 0; o < len(w); o += typ.TypeSize() {
				for i := o; i < o+typ.TypeSize(); i++ {
					w[i] = tc.wq
				}
				switch typ {
				case Q6_K:
					binary.LittleEndian.PutUint16(w[o+208:], 0x3c00)
				case IQ4_XS:
					binary.LittleEndian.PutUint16(w[o:], 0x3c00)
				case Q2_K:
					binary.LittleEndian.PutUint16(w[o+80:], 0x3c00)
					binary.LittleEndian.PutUint16(w[o+82:], 0x3800)
				case Q3_K:
					binary.LittleEndian.PutUint16(w[o+108:], 0x3c00)
				default:
					binary.LittleEndian.PutUint16(w[o:], 0x3c00)   // d = 1
					binary.LittleEndian.PutUint16(w[o+2:], 0x3800) // dmin = 0.5
				}
			}
			x := make([]byte, MaxCols*Q8_K.RowSize(k))
			for o := 0; o < len(x); o += q8_KBytes {
				binary.LittleEndian.PutUint32(x[o:], math.Float32bits(1))
				for i := 0; i < QK_K; i++ {
					x[o+4+i] = byte(tc.xq)
				}
				for g := 0; g < 16; g++ {
					binary.LittleEndian.PutUint16(x[o+4+QK_K+2*g:], uint16(int16(16*int(tc.xq))))
				}
			}
			for _, v := range []string{"neon", "neon-dp"} {
				t.Run(v+"/"+typ.String()+"/"+tc.name, func(t *testing.T) {
					asm := requireNEON(t, v, typ)
					for nx := 1; nx <= MaxCols; nx++ {
						if n := compareNEON(t, asm, typ, k, w, x, Q8_K.RowSize(k), nx); n != nx {
							t.Fatalf("nx=%d: only %d of %d columns compared", nx, n, nx)
						}
					}
				})
			}
		}
	}
}

// TestNEONFloatSpecialValues feeds subnormal, largest and signed-zero F16/BF16 weights.
func TestNEONFloatSpecialValues(t *testing.T) {
	const k = 96 + 5
	r := rand.New(rand.NewPCG(7, 7))
	for _, typ := range []Type{F16, BF16} {
		w := make([]byte, 2*k)
		for i := 0; i < k; i++ {
			h := uint16(r.IntN(0x400)) | uint16(i&1)<<15 // subnormals (F16) or tiny normals (BF16)
			switch i % 7 {
			case 3:
				h = 0x8000
			case 5:
				h = 0x7bff // F16 max; a bf16 of about 5e36
				if typ == BF16 {
					h = 0x4f00
				}
			}
			binary.LittleEndian.PutUint16(w[2*i:], h)
		}
		x := neonActs(r, typ, k, MaxCols, 4*k)
		t.Run(typ.String(), func(t *testing.T) {
			asm := requireNEON(t, "neon", typ)
			for nx := 1; nx <= MaxCols; nx++ {
				if n := compareNEON(t, asm, typ, k, w, x, 4*k, nx); n != nx {
					t.Fatalf("nx=%d: only %d of %d columns compared", nx, n, nx)
				}
			}
		})
	}
}
