package quant

import "encoding/binary"

// The 32-element block types besides Q4_0 and Q8_0: Q4_1, Q5_0, Q5_1 and IQ4_NL (layouts from
// ggml-common.h). All are dotted with Q8_0 activations. llama.cpp gives Q4_1 and Q5_1 Q8_1
// activations, whose extra field is the block's d·Σqs rounded to f16; ubatch takes Σqs from the
// Q8_0 quants instead, which is the same integer sum without the rounding.
const (
	q4_1Bytes  = 20 // f16 d, f16 m, uint8 qs[16]
	q5_0Bytes  = 22 // f16 d, uint8 qh[4], uint8 qs[16]
	q5_1Bytes  = 24 // f16 d, f16 m, uint8 qh[4], uint8 qs[16]
	iq4NLBytes = 18 // f16 d, uint8 qs[16]
)

// iq4Values are the 16 levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl), indexed by nibble.
var iq4Values = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// nibbles32 writes the 32 levels of a 4-bit block (16 bytes, element j in the low nibble of
// qs[j], element j+16 in the high nibble) to l, with bit j of qh (a little-endian uint32 in
// Q5_0/Q5_1 blocks, 0 otherwise) as element j's bit 4 and bias subtracted (wrapping, so that
// l holds the int8 bit pattern of level-bias).
func nibbles32(l *[32]byte, qs []byte, qh uint32, bias byte) {
	qs = qs[:16]
	for j, q := range qs {
		l[j] = (q&0xf | byte(qh>>j&1)<<4) - bias
		l[j+16] = (q>>4 | byte(qh>>(j+16)&1)<<4) - bias
	}
}

// levelsQ4_1 decodes the levels 0..15 of a Q4_1 block; value = d*l + m.
func levelsQ4_1(l *[32]byte, blk []byte) { nibbles32(l, blk[4:20], 0, 0) }

// levelsQ5_0 decodes the levels of a Q5_0 block as int8 bit patterns of l-16 in [-16, 15];
// value = d*(l-16).
func levelsQ5_0(l *[32]byte, blk []byte) {
	nibbles32(l, blk[6:22], binary.LittleEndian.Uint32(blk[2:]), 16)
}

// levelsQ5_1 decodes the levels 0..31 of a Q5_1 block; value = d*l + m.
func levelsQ5_1(l *[32]byte, blk []byte) {
	nibbles32(l, blk[8:24], binary.LittleEndian.Uint32(blk[4:]), 0)
}

// levelsIQ4NL decodes an IQ4_NL block to its table values (int8 bit patterns); value = d*v.
func levelsIQ4NL(l *[32]byte, blk []byte) {
	qs := blk[2:18]
	for j, q := range qs {
		l[j] = byte(iq4Values[q&0xf])
		l[j+16] = byte(iq4Values[q>>4])
	}
}

// dequant32 expands 32-element blocks of blockBytes bytes starting with the f16 scale d, whose
// levels decodes: value = d*l for symmetric types (int8 levels), d*l + m with withMin (m the f16
// after d).
func dequant32(levels func(l *[32]byte, blk []byte), blockBytes int, withMin bool, src []byte, dst []float32) {
	var buf [32]byte
	l := noescapePtr(&buf) // stays on the stack: levels, a function value, keeps nothing
	for b := 0; b < len(dst)/32; b++ {
		blk := src[b*blockBytes : (b+1)*blockBytes]
		d := f16At(blk)
		levels(l, blk)
		y := dst[b*32 : b*32+32]
		if withMin {
			m := f16At(blk[2:])
			for j := range y {
				y[j] = float32(l[j])*d + m
			}
			continue
		}
		for j := range y {
			y[j] = float32(int8(l[j])) * d
		}
	}
}

// dequantQ4_1 expands Q4_1 blocks: value = d*q + m.
func dequantQ4_1(src []byte, dst []float32) { dequant32(levelsQ4_1, q4_1Bytes, true, src, dst) }

// dequantQ5_0 expands Q5_0 blocks: value = d*(q-16) with the fifth bit of q in qh.
func dequantQ5_0(src []byte, dst []float32) { dequant32(levelsQ5_0, q5_0Bytes, false, src, dst) }

// dequantQ5_1 expands Q5_1 blocks: value = d*q + m with the fifth bit of q in qh.
func dequantQ5_1(src []byte, dst []float32) { dequant32(levelsQ5_1, q5_1Bytes, true, src, dst) }

// dequantIQ4NL expands IQ4_NL blocks: value = d*iq4Values[nibble].
func dequantIQ4NL(src []byte, dst []float32) {
	dequant32(levelsIQ4NL, iq4NLBytes, false, src, dst)
}

// sum32 is the sum of 32 int8 quants stored as bytes.
func sum32(x *[32]byte) int32 {
	var s int32
	for _, v := range x {
		s += int32(int8(v))
	}
	return s
}

// dot32Go is the shared body of the DotFuncs for the 32-element block types with Q8_0
// activations whose blocks (blockBytes long) start with the f16 scale d: each block's levels are
// decoded once by levels and, for symmetric types (Q5_0, IQ4_NL: value = d*l, int8 levels),
// d*dx*(levels·quants) is added to each column, exactly as dotQ4_0Go does; with withMin (Q4_1,
// Q5_1: value = d*l + m, m the f16 after d), dx*(d*(l·quants) + m*Σquants).
func dot32Go(levels func(l *[32]byte, blk []byte), blockBytes int, withMin bool, k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	var acc [MaxCols]float32
	var buf [32]byte
	wq := noescapePtr(&buf) // stays on the stack: levels, a function value, keeps nothing
	for b := 0; b < k/32; b++ {
		blk := w[b*blockBytes : (b+1)*blockBytes]
		dw, mw := f16At(blk), float32(0)
		if withMin {
			mw = f16At(blk[2:])
		}
		levels(wq, blk)
		for j := 0; j < nx; j++ {
			off := j*xStride + b*q8_0Bytes
			xb := x[off : off+q8_0Bytes]
			xq := (*[32]byte)(xb[2:34])
			if withMin {
				acc[j] += f16At(xb) * (dw*float32(dot32(wq, xq)) + mw*float32(sum32(xq)))
			} else {
				acc[j] += float32(dot32(wq, xq)) * (dw * f16At(xb))
			}
		}
	}
	copy(out[:nx], acc[:nx])
}

// dotQ4_1Go is the DotFunc for Q4_1 weights with Q8_0 activations.
func dotQ4_1Go(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dot32Go(levelsQ4_1, q4_1Bytes, true, k, w, x, xStride, nx, out)
}

// dotQ5_0Go is the DotFunc for Q5_0 weights with Q8_0 activations.
func dotQ5_0Go(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dot32Go(levelsQ5_0, q5_0Bytes, false, k, w, x, xStride, nx, out)
}

// dotQ5_1Go is the DotFunc for Q5_1 weights with Q8_0 activations.
func dotQ5_1Go(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dot32Go(levelsQ5_1, q5_1Bytes, true, k, w, x, xStride, nx, out)
}

// dotIQ4NLGo is the DotFunc for IQ4_NL weights with Q8_0 activations.
func dotIQ4NLGo(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dot32Go(levelsIQ4NL, iq4NLBytes, false, k, w, x, xStride, nx, out)
}
