package quant

import (
	"math"
)

// MXFP4 (ggml's block_mxfp4, the OCP microscaling FP4 format gpt-oss's experts are stored in):
// 32 elements in 17 bytes, one E8M0 scale byte e, then 16 bytes of 4-bit E2M1 codes, element j
// in the low nibble of qs[j] and element j+16 in the high nibble (as IQ4_NL). ggml keeps the
// E2M1 values doubled, as the int8 table mxfp4Values, and halves the scale to match:
// value = mxfp4Values[code] * 2^(e-128). Every byte pattern is a valid block (e = 255 is 2^127,
// not a NaN, as ggml reads it). Rows are dotted with Q8_0 activations like IQ4_NL's.
const mxfp4Bytes = 17 // uint8 e, uint8 qs[16]

// mxfp4Values are the E2M1 values times two (ggml's kvalues_mxfp4), indexed by the 4-bit code:
// bit 3 is the sign, bits 0-2 the magnitude 0, 0.5, 1, 1.5, 2, 3, 4, 6.
var mxfp4Values = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// e8m0Half is 2^(e-128), the scale of an MXFP4 block with scale byte e (ggml's
// GGML_E8M0_TO_FP32_HALF: half the E8M0 value, because the table holds doubled values); exact,
// subnormal for e < 2.
func e8m0Half(e byte) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// levelsMXFP4 decodes an MXFP4 block to its table values (int8 bit patterns); value = d*v with
// d = e8m0Half(blk[0]).
func levelsMXFP4(l *[32]byte, blk []byte) {
	qs := blk[1:17]
	for j, q := range qs {
		l[j] = byte(mxfp4Values[q&0xf])
		l[j+16] = byte(mxfp4Values[q>>4])
	}
}

// dequantMXFP4 expands MXFP4 blocks: value = e8m0Half(e) * mxfp4Values[code] (exact: a power of
// two times a small integer).
func dequantMXFP4(src []byte, dst []float32) {
	eachDequant(src, dst, 32, mxfp4Bytes, func(blk []byte, y []float32) {
		d := e8m0Half(blk[0])
		qs := blk[1:17]
		for j, q := range qs {
			y[j] = float32(mxfp4Values[q&0xf]) * d
			y[j+16] = float32(mxfp4Values[q>>4]) * d
		}
	})
}

// dotMXFP4Go is the DotFunc for MXFP4 weights with Q8_0 activations, the twin of the assembly
// kernels: per block the exact integer sum of table values times activation quants, times
// e8m0Half(e)·d_x, summed over the blocks in order (ggml's ggml_vec_dot_mxfp4_q8_0).
func dotMXFP4Go(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	var acc [MaxCols]float32
	var wq [32]byte
	for b := 0; b < k/32; b++ {
		blk := w[b*mxfp4Bytes : (b+1)*mxfp4Bytes]
		dw := e8m0Half(blk[0])
		levelsMXFP4(&wq, blk)
		for j := 0; j < nx; j++ {
			off := j*xStride + b*q8_0Bytes
			xb := x[off : off+q8_0Bytes]
			acc[j] += float32(dot32(&wq, (*[32]byte)(xb[2:34]))) * (dw * f16At(xb))
		}
	}
	copy(out[:nx], acc[:nx])
}

// mxfp4Exponent is the scale byte ggml's quantize_row_mxfp4_ref gives a block whose largest
// magnitude is amax: floor(log2f(amax)) - 2 + 127, so that amax/2^(e-127) is in [4, 8) and
// rounds onto the top E2M1 values; 0 for amax 0 (or NaN). The log is taken in float64 and
// rounded to float32 first, as log2f returns it, so that an amax just below a power of two
// floors as ggml's does. ggml's cast to uint8 is undefined outside [0, 255] (amax below 2^-125,
// or Inf); there the exponent is clamped to [0, 254].
func mxfp4Exponent(amax float32) byte {
	if !(amax > 0) {
		return 0
	}
	l := math.Floor(float64(float32(math.Log2(float64(amax)))))
	return byte(min(max(l-2+127, 0), 254))
}

// bestIndexMXFP4 is the code whose value v·d is nearest to x, the first of equals in code order
// (ggml's best_index_mxfp4: so 0 codes as +0, not -0).
func bestIndexMXFP4(x, d float32) byte {
	best, bestErr := 0, abs32(float32(float32(mxfp4Values[0])*d)-x)
	for i := 1; i < 16; i++ {
		if err := abs32(float32(float32(mxfp4Values[i])*d) - x); err < bestErr {
			best, bestErr = i, err
		}
	}
	return byte(best)
}

// quantizeMXFP4 quantizes MXFP4 blocks as ggml's quantize_row_mxfp4_ref: the scale byte from the
// block's largest magnitude (mxfp4Exponent, NaNs skipped as ggml's comparison skips them) and
// each element's nearest code.
func quantizeMXFP4(src []float32, dst []byte) {
	var l [32]byte
	eachBlock(src, dst, 32, mxfp4Bytes, func(x []float32, blk []byte) {
		var amax float32
		for _, v := range x {
			if amax < abs32(v) {
				amax = abs32(v)
			}
		}
		e := mxfp4Exponent(amax)
		d := e8m0Half(e)
		blk[0] = e
		for j, v := range x[:32] {
			l[j] = bestIndexMXFP4(v, d)
		}
		packNibbles32(blk[1:17], nil, &l)
	})
}
