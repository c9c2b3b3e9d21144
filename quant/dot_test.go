package quant

import (
	"math"
	"testing"
)

var dotTypes = []struct {
	name string
	typ  Type
	act  Type
}{
	{"F32", F32, F32},
	{"F16", F16, F32},
	{"BF16", BF16, F32},
	{"Q8_0", Q8_0, Q8_0},
	{"Q4_0", Q4_0, Q8_0},
	{"Q4_K", Q4_K, Q8_K},
	{"Q5_K", Q5_K, Q8_K},
	{"Q6_K", Q6_K, Q8_K},
	{"Q4_1", Q4_1, Q8_0},
	{"Q5_0", Q5_0, Q8_0},
	{"Q5_1", Q5_1, Q8_0},
	{"IQ4_NL", IQ4_NL, Q8_0},
	{"Q2_K", Q2_K, Q8_K},
	{"Q3_K", Q3_K, Q8_K},
	{"IQ4_XS", IQ4_XS, Q8_K},
	{"MXFP4", MXFP4, Q8_0},
}

func TestActType(t *testing.T) {
	for _, tc := range dotTypes {
		t.Run(tc.name, func(t *testing.T) {
			if got := ActType(tc.typ); got != tc.act {
				t.Errorf("ActType(%v) = %v, want %v", tc.typ, got, tc.act)
			}
			if DotGo(tc.typ) == nil {
				t.Errorf("DotGo(%v) is nil", tc.typ)
			}
		})
	}
	for _, typ := range []Type{Q8_K, Q8_1, Type(77)} {
		if DotGo(typ) != nil {
			t.Errorf("DotGo(%v) should be nil", typ)
		}
	}
}

// quantRows quantizes rows (each of k elements) of x to typ, returning the packed rows with the
// given byte stride (>= typ.RowSize(k); the padding is filled with 0xAA).
func quantRows(t testing.TB, typ Type, x []float32, k, stride int) []byte {
	n := len(x) / k
	out := make([]byte, n*stride)
	for i := range out {
		out[i] = 0xAA
	}
	for r := 0; r < n; r++ {
		if err := Quantize(typ, x[r*k:(r+1)*k], out[r*stride:r*stride+typ.RowSize(k)]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func dequantRow(t testing.TB, typ Type, b []byte, k int) []float32 {
	y := make([]float32, k)
	if err := Dequantize(typ, b[:typ.RowSize(k)], y); err != nil {
		t.Fatal(err)
	}
	return y
}

// TestDotMatchesDequantized checks every kernel against the float64 dot of the dequantized weight
// row with the dequantized activation row: both sides see the same quantized values, so only
// float32 summation error separates them. Multi-column calls must equal single-column calls
// exactly.
func TestDotMatchesDequantized(t *testing.T) {
	const k = 4 * QK_K
	w := gaussian(11, k, 0.05)
	xs := gaussian(12, MaxCols*k, 1)
	for i := range xs {
		xs[i] += float32(i%7) * 0.01 // a non-zero mean exercises the K-quant min terms
	}
	for _, tc := range dotTypes {
		t.Run(tc.name, func(t *testing.T) {
			wq := quantRows(t, tc.typ, w, k, tc.typ.RowSize(k))
			wd := dequantRow(t, tc.typ, wq, k)
			xRow := tc.act.RowSize(k)
			stride := xRow + 40 // padded rows check that xStride is honoured
			xq := make([]byte, MaxCols*stride)
			for j := 0; j < MaxCols; j++ {
				QuantizeAct(tc.typ, xs[j*k:(j+1)*k], xq[j*stride:])
			}
			dot := DotGo(tc.typ)
			var single [MaxCols]float32
			for j := 0; j < MaxCols; j++ {
				xd := dequantRow(t, tc.act, xq[j*stride:], k)
				var want, mag float64
				for i := range wd {
					want += float64(wd[i]) * float64(xd[i])
					mag += math.Abs(float64(wd[i]) * float64(xd[i]))
				}
				dot(k, wq, xq[j*stride:], stride, 1, single[j:j+1])
				if d := math.Abs(float64(single[j]) - want); d > 1e-5*mag {
					t.Errorf("column %d: dot %v, dequantized dot %v (|diff| %.3g, Σ|wx| %.3g)", j, single[j], want, d, mag)
				}
				if got := Dot(tc.typ, k, wq, xq[j*stride:]); got != single[j] {
					t.Errorf("Dot = %v, DotFunc = %v", got, single[j])
				}
				// Without noescape's assembly (other architectures) Dot's result escapes.
				if n := testing.AllocsPerRun(5, func() { Dot(tc.typ, k, wq, xq[j*stride:]) }); n != 0 && noescapeHides {
					t.Errorf("Dot allocates %v times", n)
				}
			}
			for nx := 2; nx <= MaxCols; nx++ {
				out := make([]float32, nx+1)
				out[nx] = -7 // must stay untouched
				dot(k, wq, xq, stride, nx, out)
				for j := 0; j < nx; j++ {
					if out[j] != single[j] {
						t.Errorf("nx=%d column %d: %v, single-column %v", nx, j, out[j], single[j])
					}
				}
				if out[nx] != -7 {
					t.Errorf("nx=%d wrote past out[:nx]", nx)
				}
			}
		})
	}
}

// TestDotAgainstFloat checks that quantized dots approximate the exact float dot product, i.e. the
// activation quantization is wired correctly (a sign or scale slip would fail this).
func TestDotAgainstFloat(t *testing.T) {
	const k = 8 * QK_K
	w := gaussian(21, k, 1)
	x := gaussian(22, k, 1)
	var exact float64
	for i := range w {
		exact += float64(w[i]) * float64(x[i])
	}
	// The quantization errors (per-element relative RMS e_w, e_x) perturb a dot of k N(0,1) pairs
	// by about sqrt(k*(e_w²+e_x²)); allow 5 sigma.
	for _, tc := range dotTypes {
		t.Run(tc.name, func(t *testing.T) {
			wq := quantRows(t, tc.typ, w, k, tc.typ.RowSize(k))
			xq := make([]byte, tc.act.RowSize(k))
			QuantizeAct(tc.typ, x, xq)
			got := float64(Dot(tc.typ, k, wq, xq))
			var ew, ex float64
			for _, b := range roundTripBounds {
				if b.typ == tc.typ {
					ew = b.bound
				}
				if b.typ == tc.act {
					ex = b.bound
				}
			}
			tol := 5*math.Sqrt(k*(ew*ew+ex*ex)) + 1e-3
			if math.Abs(got-exact) > tol {
				t.Errorf("dot %v, exact %v, tolerance %v", got, exact, tol)
			}
		})
	}
}

func TestQuantizeActNoAlloc(t *testing.T) {
	x := gaussian(5, 2*QK_K, 1)
	for _, tc := range dotTypes {
		t.Run(tc.name, func(t *testing.T) {
			dst := make([]byte, tc.act.RowSize(len(x)))
			if n := testing.AllocsPerRun(10, func() { QuantizeAct(tc.typ, x, dst) }); n != 0 {
				t.Errorf("QuantizeAct allocates %v times", n)
			}
			want := make([]byte, len(dst))
			if err := Quantize(tc.act, x, want); err != nil {
				t.Fatal(err)
			}
			if string(want) != string(dst) {
				t.Errorf("QuantizeAct differs from Quantize(%v)", tc.act)
			}
		})
	}
}

func TestQuantizeActPanics(t *testing.T) {
	tests := []struct {
		name string
		typ  Type
		k    int
		dst  int
	}{
		{"k not a block multiple", Q4_K, 100, 1000},
		{"short dst", Q4_0, 64, 67},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mustPanic(t, tc.name, func() { QuantizeAct(tc.typ, make([]float32, tc.k), make([]byte, tc.dst)) })
		})
	}
}
