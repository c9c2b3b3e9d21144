package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"ubatch/internal/testdata"
)

// gaussian returns n seeded N(0, sigma²) samples.
func gaussian(seed uint64, n int, sigma float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * sigma)
	}
	return x
}

// roundTrip quantizes x to t and dequantizes it back.
func roundTrip(t *testing.T, typ Type, x []float32) []float32 {
	t.Helper()
	q := make([]byte, typ.RowSize(len(x)))
	if err := Quantize(typ, x, q); err != nil {
		t.Fatalf("Quantize(%v): %v", typ, err)
	}
	y := make([]float32, len(x))
	if err := Dequantize(typ, q, y); err != nil {
		t.Fatalf("Dequantize(%v): %v", typ, err)
	}
	return y
}

// Bounds are a little above what these quantizers measure on 16384 N(0,1) samples (the test logs
// them): F16 2.1e-4, BF16 1.7e-3, Q8_0 5.3e-3, Q8_K 6.9e-3, Q6_K 1.77e-2, Q5_K 3.59e-2,
// Q4_K 7.15e-2, Q4_0 8.56e-2, Q4_1 7.79e-2, Q5_0 4.24e-2, Q5_1 3.77e-2, IQ4_NL 7.57e-2,
// Q2_K 0.296, Q3_K 0.150, IQ4_XS 7.63e-2, MXFP4 0.114. Q8_0's is what a uniform step of amax/127
// predicts (2.1σ/127/√12 ≈ 4.8e-3 for 32 Gaussians).
var roundTripBounds = []struct {
	name  string
	typ   Type
	bound float64
}{
	{"F32", F32, 0},
	{"F16", F16, 3e-4},
	{"BF16", BF16, 2e-3},
	{"Q8_0", Q8_0, 6e-3},
	{"Q8_K", Q8_K, 7.5e-3},
	{"Q6_K", Q6_K, 2e-2},
	{"Q5_K", Q5_K, 4e-2},
	{"Q4_K", Q4_K, 8e-2},
	{"Q4_0", Q4_0, 9.5e-2},
	{"Q4_1", Q4_1, 8.5e-2},
	{"Q5_0", Q5_0, 4.6e-2},
	{"Q5_1", Q5_1, 4.1e-2},
	{"IQ4_NL", IQ4_NL, 8.2e-2},
	{"Q2_K", Q2_K, 0.32},
	{"Q3_K", Q3_K, 0.165},
	{"IQ4_XS", IQ4_XS, 8.3e-2},
	{"MXFP4", MXFP4, 0.125},
}

func TestRoundTripGaussian(t *testing.T) {
	x := gaussian(1, 64*QK_K, 1)
	for _, tc := range roundTripBounds {
		t.Run(tc.name, func(t *testing.T) {
			y := roundTrip(t, tc.typ, x)
			e := testdata.RelRMS(y, x)
			t.Logf("%v relative RMS error %.3g", tc.typ, e)
			if e > tc.bound {
				t.Errorf("%v relative RMS error %.3g > %.3g", tc.typ, e, tc.bound)
			}
		})
	}
}

// TestRoundTripShapes checks inputs that stress the scale searches: zeros, constants, one-signed
// data, mixed magnitudes across blocks and values far from 1.
func TestRoundTripShapes(t *testing.T) {
	n := 2 * QK_K
	mk := func(f func(i int) float32) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = f(i)
		}
		return x
	}
	g := gaussian(7, n, 1)
	inputs := []struct {
		name  string
		x     []float32
		scale float64 // bound multiplier relative to the Gaussian bounds (2 blocks are noisier)
	}{
		{"zeros", mk(func(int) float32 { return 0 }), 0},
		{"positive constant", mk(func(int) float32 { return 0.75 }), 1},
		{"negative constant", mk(func(int) float32 { return -3 }), 1},
		{"positive only", mk(func(i int) float32 { return abs32(g[i]) + 0.1 }), 1.25},
		{"negative only", mk(func(i int) float32 { return -abs32(g[i]) - 0.1 }), 1.25},
		// Small values push the f16 super-scales of the K-quants into the subnormal range.
		{"tiny", mk(func(i int) float32 { return g[i] * 1e-3 }), 1.5},
		{"large", mk(func(i int) float32 { return g[i] * 1e3 }), 1.25},
		// Blocks of 32 differing 64x in magnitude: one scale per 256 (Q8_K) serves small blocks badly.
		{"mixed block scales", mk(func(i int) float32 { return g[i] * float32(math.Pow(4, float64(i/32%4))) }), 2},
		{"uniform", mk(func(i int) float32 { return float32(i%37)/18 - 1 }), 1.25},
	}
	for _, in := range inputs {
		for _, tc := range roundTripBounds {
			t.Run(in.name+"/"+tc.name, func(t *testing.T) {
				y := roundTrip(t, tc.typ, in.x)
				for i, v := range y {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("element %d is %v", i, v)
					}
				}
				if e := testdata.RelRMS(y, in.x); e > tc.bound*in.scale+1e-7 {
					t.Errorf("relative RMS error %.3g > %.3g", e, tc.bound*in.scale)
				}
			})
		}
	}
}

func TestLengthErrors(t *testing.T) {
	tests := []struct {
		name   string
		typ    Type
		nElems int
		nBytes int
		want   string
	}{
		{"not a block multiple", Q4_0, 33, Q4_0.RowSize(32), "multiple"},
		{"short src", Q8_0, 64, 67, "take 68 bytes"},
		{"long src", Q6_K, 256, 211, "take 210 bytes"},
		{"unsupported", Q8_1, 32, 36, "not supported"},
		{"unknown", Type(99), 32, 32, "unknown type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Dequantize(tc.typ, make([]byte, tc.nBytes), make([]float32, tc.nElems))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Dequantize error %v, want it to mention %q", err, tc.want)
			}
			err = Quantize(tc.typ, make([]float32, tc.nElems), make([]byte, tc.nBytes))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Quantize error %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// TestHandBuiltBlocks decodes blocks written byte by byte from ggml's layouts, independent of the
// quantizers.
func TestHandBuiltBlocks(t *testing.T) {
	t.Run("Q4_0", func(t *testing.T) {
		blk := make([]byte, 18)
		binary.LittleEndian.PutUint16(blk, F32ToF16(0.5))
		for j := 0; j < 16; j++ {
			blk[2+j] = byte(j) | byte(15-j)<<4
		}
		y := make([]float32, 32)
		if err := Dequantize(Q4_0, blk, y); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 16; j++ {
			if y[j] != float32(j-8)*0.5 || y[j+16] != float32(7-j)*0.5 {
				t.Fatalf("element %d/%d = %v/%v", j, j+16, y[j], y[j+16])
			}
		}
	})
	t.Run("Q8_0", func(t *testing.T) {
		blk := make([]byte, 34)
		binary.LittleEndian.PutUint16(blk, F32ToF16(0.25))
		for j := 0; j < 32; j++ {
			blk[2+j] = byte(int8(j*8 - 128))
		}
		y := make([]float32, 32)
		if err := Dequantize(Q8_0, blk, y); err != nil {
			t.Fatal(err)
		}
		for j := range y {
			if y[j] != float32(j*8-128)*0.25 {
				t.Fatalf("element %d = %v", j, y[j])
			}
		}
	})
	t.Run("Q4_K scales", func(t *testing.T) {
		var ls, lm [8]uint8
		for j := range ls {
			ls[j], lm[j] = uint8(63-5*j), uint8(7*j+3)
		}
		var packed [12]byte
		packScalesK4(packed[:], &ls, &lm)
		for j := 0; j < 8; j++ {
			if sc, m := scaleMinK4(j, packed[:]); sc != ls[j] || m != lm[j] {
				t.Fatalf("sub-block %d: got %d/%d want %d/%d", j, sc, m, ls[j], lm[j])
			}
		}
		// A block with d=1, dmin=1, scale j+1, min j and level l%16 for element l of sub-block j.
		blk := make([]byte, q4_KBytes)
		binary.LittleEndian.PutUint16(blk[0:], F32ToF16(1))
		binary.LittleEndian.PutUint16(blk[2:], F32ToF16(1))
		for j := range ls {
			ls[j], lm[j] = uint8(j+1), uint8(j)
		}
		packScalesK4(blk[4:16], &ls, &lm)
		for g := 0; g < 4; g++ {
			for l := 0; l < 32; l++ {
				blk[16+32*g+l] = byte(l%16) | byte((l+1)%16)<<4
			}
		}
		y := make([]float32, QK_K)
		if err := Dequantize(Q4_K, blk, y); err != nil {
			t.Fatal(err)
		}
		for i, v := range y {
			sub, l := i/32, i%32
			q := l % 16
			if sub%2 == 1 {
				q = (l + 1) % 16
			}
			if want := float32((sub+1)*q - sub); v != want {
				t.Fatalf("element %d = %v, want %v", i, v, want)
			}
		}
	})
}

func TestQ8KBsums(t *testing.T) {
	x := gaussian(3, 3*QK_K, 2)
	q := make([]byte, Q8_K.RowSize(len(x)))
	if err := Quantize(Q8_K, x, q); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < 3; b++ {
		blk := q[b*q8_KBytes : (b+1)*q8_KBytes]
		for g := 0; g < 16; g++ {
			var s int
			for _, v := range blk[4+16*g : 4+16*g+16] {
				s += int(int8(v))
			}
			if got := int(int16(binary.LittleEndian.Uint16(blk[4+QK_K+2*g:]))); got != s {
				t.Fatalf("block %d group %d: bsum %d, want %d", b, g, got, s)
			}
		}
	}
}

func TestNearestInt(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want int32
	}{
		{"zero", 0, 0},
		{"half to even down", 0.5, 0},
		{"one and a half to even up", 1.5, 2},
		{"negative half", -2.5, -2},
		{"below half", 0.49999997, 0},
		{"negative", -7.6, -8},
		{"large", 4194303, 4194303},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := nearestInt(tc.in); got != tc.want {
				t.Errorf("nearestInt(%v) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestRoundAway(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want int32
	}{
		{"zero", 0, 0},
		{"half away up", 0.5, 1},
		{"half away down", -0.5, -1},
		{"two and a half", 2.5, 3},
		{"just below half", 0.49999997, 0},
		{"negative just below half", -0.49999997, 0},
		{"plain", -126.7, -127},
		{"large", 8388607.5, 8388608},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := roundAway(tc.in); got != tc.want {
				t.Errorf("roundAway(%v) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
	r := rand.New(rand.NewPCG(4, 4))
	for i := 0; i < 100000; i++ {
		f := float32(r.NormFloat64() * 100)
		if got, want := roundAway(f), int32(math.Round(float64(f))); got != want {
			t.Fatalf("roundAway(%v) = %d, math.Round gives %d", f, got, want)
		}
	}
}

// TestRoundAway127 checks the branch-free rounding against roundf's definition (half away from
// zero) on every float32 within a few ulps of the half-integers in [-128.5, 128.5], and clamping.
func TestRoundAway127(t *testing.T) {
	want := func(f float32) int32 {
		r := math.Trunc(float64(f) + math.Copysign(0.5, float64(f)))
		if math.Abs(float64(f)-math.Trunc(float64(f))) < 0.5 {
			r = math.Trunc(float64(f))
		}
		return int32(min(max(r, -128), 127))
	}
	for k := -129; k <= 128; k++ {
		mid := float32(k) + 0.5
		for _, f := range []float32{mid, float32(k), -float32(k)} {
			x := f
			for range 4 {
				x = math.Nextafter32(x, float32(math.Inf(-1)))
			}
			for range 9 {
				if math.Abs(float64(x)) <= 128.5 {
					if got := roundAway127(x); got != want(x) {
						t.Fatalf("roundAway127(%v) = %d, want %d", x, got, want(x))
					}
				}
				x = math.Nextafter32(x, float32(math.Inf(1)))
			}
		}
	}
	for _, c := range []struct {
		name string
		f    float32
		want int32
	}{
		{"just below a half", 0.49999997, 0},
		{"just above minus a half", -0.49999997, 0},
		{"half", 0.5, 1},
		{"minus half", -0.5, -1},
		{"clamped high", 127.5, 127},
		{"clamped low", -128.5, -128},
		{"zero", 0, 0},
	} {
		if got := roundAway127(c.f); got != c.want {
			t.Errorf("%s: roundAway127(%v) = %d, want %d", c.name, c.f, got, c.want)
		}
	}
}
