package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

func isNaN32(f float32) bool { return f != f }

func TestF16RoundTripExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := F16ToF32(h)
		if f != f16ToF32Slow(h) && !isNaN32(f) {
			t.Fatalf("table and slow conversion disagree for %#04x", h)
		}
		back := F32ToF16(f)
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			if !isNaN32(f) || back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x -> %v -> %#04x, want NaN", h, f, back)
			}
			continue
		}
		if back != h {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
}

// TestF32ToF16Midpoints checks rounding at every midpoint between adjacent finite halves: the exact
// midpoint goes to the even neighbour, one float32 ulp either side to the nearer one.
func TestF32ToF16Midpoints(t *testing.T) {
	for i := 0; i < 0x7c00; i++ {
		for _, sign := range []uint16{0, 0x8000} {
			lo := uint16(i) | sign
			hi := uint16(i+1) | sign // for i = 0x7bff this is Inf, the overflow neighbour
			a, b := float64(F16ToF32(lo)), float64(F16ToF32(hi))
			if i == 0x7bff {
				b = math.Copysign(65536, a)
			}
			mid := float32((a + b) / 2) // exact: halves need 11 significant bits, midpoints 12
			if float64(mid) != (a+b)/2 {
				t.Fatalf("midpoint of %#04x not exact", lo)
			}
			even := lo
			if lo&1 == 1 {
				even = hi
			}
			if got := F32ToF16(mid); got != even {
				t.Fatalf("F32ToF16(%g) = %#04x, want %#04x (tie to even)", mid, got, even)
			}
			toZero := math.Nextafter32(mid, 0)
			away := math.Nextafter32(mid, float32(math.Copysign(math.Inf(1), a+b)))
			if got := F32ToF16(toZero); got != lo && !(i == 0 && got&0x7fff == 0) {
				t.Fatalf("F32ToF16(%g) = %#04x, want %#04x", toZero, got, lo)
			}
			if got := F32ToF16(away); got != hi {
				t.Fatalf("F32ToF16(%g) = %#04x, want %#04x", away, got, hi)
			}
		}
	}
}

func TestF32ToF16Special(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"max half", 65504, 0x7bff},
		{"just below overflow tie", 65519.99, 0x7bff},
		{"overflow tie", 65520, 0x7c00},
		{"large", 1e10, 0x7c00},
		{"inf", float32(math.Inf(1)), 0x7c00},
		{"minus inf", float32(math.Inf(-1)), 0xfc00},
		{"smallest subnormal", 0x1p-24, 0x0001},
		{"half smallest subnormal ties to zero", 0x1p-25, 0x0000},
		{"above half smallest subnormal", 0x1.000002p-25, 0x0001},
		{"tiny", 1e-30, 0x0000},
		{"float32 subnormal", math.Float32frombits(1), 0x0000},
		{"largest subnormal", 0x3ffp-24, 0x03ff},
		{"subnormal rounds up to normal", 0x1.ffcp-15, 0x0400},
		{"smallest normal", 0x1p-14, 0x0400},
		{"one third", 1.0 / 3, 0x3555},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := F32ToF16(tc.in); got != tc.want {
				t.Errorf("F32ToF16(%g) = %#04x, want %#04x", tc.in, got, tc.want)
			}
		})
	}
	if h := F32ToF16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("F32ToF16(NaN) = %#04x, not a NaN", h)
	}
}

func TestBF16(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"one", 1, 0x3f80},
		{"minus two", -2, 0xc000},
		{"tie to even down", math.Float32frombits(0x3f808000), 0x3f80},
		{"tie to even up", math.Float32frombits(0x3f818000), 0x3f82},
		{"above tie", math.Float32frombits(0x3f808001), 0x3f81},
		{"overflow to inf", math.Float32frombits(0x7f7fffff), 0x7f80},
		{"inf", float32(math.Inf(-1)), 0xff80},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := F32ToBF16(tc.in); got != tc.want {
				t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", tc.in, got, tc.want)
			}
		})
	}
	if h := F32ToBF16(math.Float32frombits(0x7f800001)); BF16ToF32(h) == BF16ToF32(h) {
		t.Errorf("signalling NaN became %#04x, not a NaN", h)
	}
	for i := 0; i < 1<<16; i++ {
		f := BF16ToF32(uint16(i))
		if isNaN32(f) {
			continue
		}
		if back := F32ToBF16(f); back != uint16(i) {
			t.Fatalf("%#04x -> %v -> %#04x", i, f, back)
		}
	}
}

func TestHalfSlices(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, 100)
	for i := range src {
		src[i] = float32(r.NormFloat64() * 10)
	}
	h := make([]uint16, len(src))
	back := make([]float32, len(src))
	F32ToF16s(h, src)
	F16ToF32s(back, h)
	for i := range src {
		if h[i] != F32ToF16(src[i]) || back[i] != F16ToF32(h[i]) {
			t.Fatalf("F16 slice conversion differs at %d", i)
		}
	}
	F32ToBF16s(h, src)
	BF16ToF32s(back, h)
	for i := range src {
		if h[i] != F32ToBF16(src[i]) || back[i] != BF16ToF32(h[i]) {
			t.Fatalf("BF16 slice conversion differs at %d", i)
		}
	}
}
