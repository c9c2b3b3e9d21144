package quant

import (
	"math"
	"testing"
)

// TestE8M0Half checks every scale byte against 2^(e-128) computed independently.
func TestE8M0Half(t *testing.T) {
	for e := range 256 {
		if got, want := e8m0Half(byte(e)), float32(math.Ldexp(1, e-128)); got != want {
			t.Errorf("e8m0Half(%d) = %g, want %g", e, got, want)
		}
	}
}

// mxBlock builds one MXFP4 block from its scale byte and 32 codes in element order.
func mxBlock(e byte, codes [32]byte) []byte {
	b := make([]byte, mxfp4Bytes)
	b[0] = e
	for j := range 16 {
		b[1+j] = codes[j] | codes[j+16]<<4
	}
	return b
}

// TestDequantMXFP4 checks the layout on hand-made blocks: element j in the low nibble of byte
// 1+j, element j+16 in the high nibble, values the E2M1 set times 2^(e-127).
func TestDequantMXFP4(t *testing.T) {
	// E2M1 by code: sign bit 3, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
	e2m1 := [16]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}
	tests := []struct {
		name string
		e    byte
	}{
		{"unit scale", 127},
		{"scale 8", 130},
		{"scale 2^-10", 117},
		{"subnormal 2^-127", 0},
		{"subnormal 2^-126", 1},
		{"largest 2^128 halved", 255},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var codes [32]byte
			for j := range codes {
				codes[j] = byte((j*7 + 3) % 16)
			}
			y := make([]float32, 32)
			if err := Dequantize(MXFP4, mxBlock(tc.e, codes), y); err != nil {
				t.Fatal(err)
			}
			for j, v := range y {
				want := e2m1[codes[j]] * math.Ldexp(1, int(tc.e)-127)
				if float64(v) != float64(float32(want)) {
					t.Errorf("element %d (code %d): %g, want %g", j, codes[j], v, want)
				}
			}
		})
	}
}

// TestQuantizeMXFP4 checks the scale byte and codes ggml's quantize_row_mxfp4_ref chooses.
func TestQuantizeMXFP4(t *testing.T) {
	below2, below8 := math.Nextafter32(2, 0), math.Nextafter32(8, 0)
	tests := []struct {
		name  string
		first []float32 // the block's first values; the rest are 0
		e     byte
		codes []byte // the codes of first
	}{
		{"zeros", nil, 0, nil},
		// amax 6: floor(log2 6) = 2, e = 127, d = 0.5, 6 is table value 12.
		{"top value", []float32{6, -6, 0.5, -0.25, 1.25}, 127, []byte{7, 15, 1, 0, 2}},
		// amax 1: e = 125, d = 1/8: 1 = 8d (code 6), 0.3 nearer 2d than 3d, -0.7 nearest -6d.
		{"power of two", []float32{1, 0.3, -0.7}, 125, []byte{6, 2, 13}},
		// Ties go to the first code in table order: with d = 1/8, 0.3125 is halfway between 0.25
		// (code 2) and 0.375 (code 3).
		{"tie", []float32{1, 0.3125, -0.3125}, 125, []byte{6, 2, 10}},
		// Just below 8 log2f rounds to 3 exactly, so e is that of 8 (128, d = 1) and the value
		// codes as 8d, where the exact floor would give e 127 and code 7 (12d = 6); just below 2
		// it rounds to the float below 1, e 125.
		{"below 8", []float32{below8}, 128, []byte{6}},
		{"below 2", []float32{below2}, 125, []byte{7}},
		{"NaN skipped", []float32{float32(math.NaN()), 3}, 126, []byte{0, 7}},
		{"tiny amax clamps to 0", []float32{1e-39}, 0, []byte{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := make([]float32, 32)
			copy(x, tc.first)
			b := make([]byte, mxfp4Bytes)
			if err := Quantize(MXFP4, x, b); err != nil {
				t.Fatal(err)
			}
			if b[0] != tc.e {
				t.Errorf("scale byte %d, want %d", b[0], tc.e)
			}
			for j, c := range tc.codes {
				if got := b[1+j] & 0xf; got != c {
					t.Errorf("element %d: code %d, want %d", j, got, c)
				}
			}
			for j := len(tc.codes); j < 32; j++ {
				if got := b[1+j%16] >> (4 * (j / 16)) & 0xf; got != 0 {
					t.Errorf("element %d (zero): code %d, want 0", j, got)
				}
			}
		})
	}
}
