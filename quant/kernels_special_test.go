//go:build amd64 || arm64

package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// The extremes of every format through the assembly kernels: weights and activations at the ends
// of their ranges, the largest and subnormal scales, and the special float values (the
// tolerance and helpers are in kernels_test.go).

// TestAsmKernelsSpecialValues feeds the extremes of the 32-element formats: Q8_0 weights of -128
// and 127 against activation quants of ±127 (and -128 where acts128Exact), Q4_0 nibbles 0 and 15,
// the largest and subnormal f16 scales.
func TestAsmKernelsSpecialValues(t *testing.T) {
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
		for _, v := range asmVariants() {
			t.Run(v.name+"/"+tc.name, func(t *testing.T) {
				asm := requireKernel(t, v, tc.typ)
				if tc.xq == 0x80 && !acts128Exact {
					t.Skip("activation quants of -128 (never written by QuantizeAct) are outside what these kernels handle")
				}
				w, x := fill(tc.typ, tc.wq, tc.xq, tc.wd, tc.xd)
				compareAll(t, asm, tc.typ, k, w, x, Q8_0.RowSize(k))
			})
		}
	}
}

// TestAsmKernelsKQuantSpecialValues feeds K-quant extremes: every level, scale and min at its
// maximum (all bytes 0xff: for Q6_K levels 31 and scales -1) or zero, or mixed nibbles, against
// Q8_K activation quants of ±127 and -128 (where acts128Exact) with their true bsums.
func TestAsmKernelsKQuantSpecialValues(t *testing.T) {
	const k = 2 * QK_K
	for _, typ := range []Type{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS} {
		for _, v := range asmVariants() {
			t.Run(v.name+"/"+typ.String(), func(t *testing.T) {
				asm := requireKernel(t, v, typ)
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
					t.Run(tc.name, func(t *testing.T) {
						if tc.xq == -128 && !acts128Exact {
							t.Skip("activation quants of -128 (never written by QuantizeAct) are outside what these kernels handle")
						}
						w, x := kQuantExtremes(typ, k, tc.wq, tc.xq)
						compareAll(t, asm, typ, k, w, x, Q8_K.RowSize(k))
					})
				}
			})
		}
	}
}

// kQuantExtremes returns a weight row of typ with every byte wq but for scales d = 1 and dmin
// = 0.5, and MaxCols Q8_K activation rows with d = 1, every quant xq and their true bsums.
func kQuantExtremes(typ Type, k int, wq byte, xq int8) (w, x []byte) {
	w = make([]byte, typ.RowSize(k))
	for o := 0; o < len(w); o += typ.TypeSize() {
		for i := o; i < o+typ.TypeSize(); i++ {
			w[i] = wq
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
	x = make([]byte, MaxCols*Q8_K.RowSize(k))
	for o := 0; o < len(x); o += q8_KBytes {
		binary.LittleEndian.PutUint32(x[o:], math.Float32bits(1))
		for i := 0; i < QK_K; i++ {
			x[o+4+i] = byte(xq)
		}
		for g := 0; g < 16; g++ {
			binary.LittleEndian.PutUint16(x[o+4+QK_K+2*g:], uint16(int16(16*int(xq))))
		}
	}
	return w, x
}

// TestAsmKernelsFloatSpecialValues feeds subnormal, largest and signed-zero F16/BF16 weights.
func TestAsmKernelsFloatSpecialValues(t *testing.T) {
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
		x := randActs(r, typ, k, MaxCols, 4*k)
		for _, v := range asmVariants() {
			t.Run(v.name+"/"+typ.String(), func(t *testing.T) {
				compareAll(t, requireKernel(t, v, typ), typ, k, w, x, 4*k)
			})
		}
	}
}
