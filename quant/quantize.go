package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"ubatch/internal/cpu"
)

// Quantize packs len(src) float32 values into dst as type t, following ggml's reference
// quantizers (quantize_row_*_ref; no importance matrix). len(src) must be a multiple of
// t.BlockSize() and len(dst) must equal t.RowSize(len(src)). Supported types: every t with
// t.Supported(); IQ4_NL and IQ4_XS follow quantize_iq4_nl/quantize_iq4_xs without an importance
// matrix, as llama-quantize runs them. Non-finite inputs give unspecified (but well-formed)
// blocks for the quantized types.
func Quantize(t Type, src []float32, dst []byte) error {
	if err := checkLens(t, len(dst), len(src)); err != nil {
		return err
	}
	quantize := t.row().quantize
	if quantize == nil {
		return fmt.Errorf("quant: quantizing to %v is not supported", t)
	}
	quantize(src, dst)
	return nil
}

func quantizeF32(src []float32, dst []byte) {
	for i, f := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
	}
}

func quantizeF16(src []float32, dst []byte) {
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(f))
	}
}

func quantizeBF16(src []float32, dst []byte) {
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(f))
	}
}

func quantizeQ4_1(src []float32, dst []byte) { quantizeMin32(src, dst, q4_1Bytes, 15) }

func quantizeQ5_1(src []float32, dst []byte) { quantizeMin32(src, dst, q5_1Bytes, 31) }

// nearestInt rounds f to the nearest integer, ties to even, exactly like ggml's nearest_int: adding
// 1.5*2^23 pushes the fraction out of the float32 mantissa. Valid for |f| <= 2^22; larger or
// non-finite inputs give an arbitrary int (callers clamp), never a panic. The float32(f)
// conversion rounds f first: inlined into nearestInt(a*b) the compiler could otherwise fuse the
// product and this add into one multiply-add (it does on arm64 and with GOAMD64=v3), which
// rounds differently from ggml.
func nearestInt(f float32) int32 {
	v := float32(f) + 12582912
	return int32(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// roundAway rounds half away from zero like C's roundf, for |f| < 2^23 (every caller's scaled
// values are within ±128). Other inputs (NaN from non-finite data, huge values) give an
// unspecified int32, never a panic; callers clamp it. Kept small enough to inline.
func roundAway(f float32) int32 {
	i := int32(f) // truncates toward zero
	r := f - float32(i)
	// Branch-free i += [r >= 0.5] - [r <= -0.5]: the fraction is random per element, so branches
	// would mispredict. The sign of r-0.5 (and of -0.5-r) is exact, and x-x is +0.
	up := ^math.Float32bits(r-0.5) >> 31
	down := ^math.Float32bits(-0.5-r) >> 31
	return i + int32(up) - int32(down)
}

// quantizeQ8_0 quantizes the len(src)/32 blocks of src into dst, with the AVX2 kernel where the
// selected path runs assembly (byte-identical, see quantize_amd64.go).
func quantizeQ8_0(src []float32, dst []byte) {
	if quantizeQ8Paths[cpu.Selected()] != cpu.Go {
		quantizeQ8_0AVX2(src, dst)
		return
	}
	quantizeQ8_0Go(src, dst)
}

// quantizeQ8_0Go follows quantize_row_q8_0_ref: d = amax/127, q = round(x/d) (half away from
// zero). It is the reference twin of the AVX2 kernel.
func quantizeQ8_0Go(src []float32, dst []byte) {
	for b := 0; b < len(src)/32; b++ {
		x := src[b*32 : b*32+32]
		blk := dst[b*q8_0Bytes : (b+1)*q8_0Bytes]
		d := abs32(signedMax(x)) / 127
		id := inv(d)
		binary.LittleEndian.PutUint16(blk, F32ToF16(d))
		qs := blk[2:34]
		for i, v := range x {
			// The explicit conversion rounds the product: without it GOAMD64=v3 builds fuse it
			// with roundAway127's addition, which changes the result for products just below
			// ±0.5 and would break the AVX2 kernel's byte identity.
			qs[i] = byte(int8(roundAway127(float32(v * id))))
		}
	}
}

// quantizeQ4_0 follows quantize_row_q4_0_ref: d = max/-8 where max is the value of largest
// magnitude (so it maps to q=0), q = min(15, trunc(x/d + 8.5)).
func quantizeQ4_0(src []float32, dst []byte) {
	eachBlock(src, dst, 32, q4_0Bytes, func(x []float32, blk []byte) {
		d := signedMax(x) / -8
		id := inv(d)
		binary.LittleEndian.PutUint16(blk, F32ToF16(d))
		qs := blk[2:18]
		for j := 0; j < 16; j++ {
			// The conversions round the products first, as the reference does: without them
			// GOAMD64=v3 may fuse product and sum into one FMA, which rounds differently.
			q0 := truncQ4(float32(x[j]*id) + 8.5)
			q1 := truncQ4(float32(x[j+16]*id) + 8.5)
			qs[j] = q0 | q1<<4
		}
	})
}

// truncQ4 truncates toward zero and clamps to [0, 15]; the argument is x/d + 8.5, which is >= 0.5
// for in-range data, so truncation is rounding to nearest.
func truncQ4(f float32) byte {
	if !(f > 0) {
		return 0
	}
	if f >= 15 {
		return 15
	}
	return byte(f)
}

// quantizeQ8_K follows quantize_row_q8_K_ref: the value of largest magnitude maps to -127,
// q = min(127, nearest(x * -127/max)), d = 1/iscale, and bsums[g] = Σ qs[16g:16g+16].
func quantizeQ8_K(src []float32, dst []byte) {
	for b := 0; b < len(src)/QK_K; b++ {
		x := src[b*QK_K : (b+1)*QK_K]
		blk := dst[b*q8_KBytes : (b+1)*q8_KBytes]
		qs := blk[4 : 4+QK_K]
		mx := signedMax(x)
		if mx == 0 {
			clear(blk)
			continue
		}
		iscale := -127 / mx
		for i, v := range x {
			qs[i] = byte(int8(clamp32(nearestInt(iscale*v), -128, 127)))
		}
		for g := 0; g < QK_K/16; g++ {
			var s int16
			for _, q := range qs[16*g : 16*g+16] {
				s += int16(int8(q))
			}
			binary.LittleEndian.PutUint16(blk[4+QK_K+2*g:], uint16(s))
		}
		binary.LittleEndian.PutUint32(blk, math.Float32bits(1/iscale))
	}
}

// roundAway127 rounds f, |f| <= 127.5, half away from zero like roundf, clamped to [-128, 127].
// Activations are quantized once per matmul input, so this avoids roundAway's float64 path and
// any branch on the sign (unpredictable on activations): it adds the largest float32 below 0.5,
// with f's sign, and truncates. Adding 0.5 itself would round 0.49999997 up (its sum with 0.5
// is not a float32 and rounds to 1); with 0.49999997 every |f| <= 127.5 rounds as roundf does.
func roundAway127(f float32) int32 {
	half := math.Float32frombits(0x3effffff | math.Float32bits(f)&0x80000000)
	return min(max(int32(f+half), -128), 127)
}

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }

func clamp32(v, lo, hi int32) int32 { return min(max(v, lo), hi) }

// eachBlock calls f for every block of a row being quantized: x the block's elems values of
// src, blk its size bytes of dst, cleared first (the quantizers OR some fields in).
func eachBlock(src []float32, dst []byte, elems, size int, f func(x []float32, blk []byte)) {
	for b := range len(src) / elems {
		blk := dst[b*size : (b+1)*size]
		clear(blk)
		f(src[b*elems:(b+1)*elems], blk)
	}
}
