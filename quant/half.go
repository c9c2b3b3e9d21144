package quant

import "math"

// f16Table maps every IEEE binary16 bit pattern to its float32 value. It is built once at package
// initialisation and only read afterwards.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = f16ToF32Slow(uint16(i))
	}
	return &t
}()

// f16ToF32Slow converts an IEEE half to float32 bit by bit; every half is exactly representable
// as a float32, so no rounding happens. NaN payloads are kept (shifted into the high mantissa).
func f16ToF32Slow(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal half: normalise the mantissa so the float32 gets an implicit leading one.
	e := uint32(127 - 15 + 1)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// F16ToF32 converts an IEEE 754 binary16 value (bit pattern h) to float32 exactly.
func F16ToF32(h uint16) float32 { return f16Table[h] }

// F32ToF16 converts f to the nearest IEEE 754 binary16 value, ties to even. Values beyond the half
// range become ±Inf, values below half the smallest subnormal become ±0, NaN stays NaN (quiet,
// keeping the top payload bits).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(man>>13)
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// The result is a half subnormal (or zero): value = m * 2^-24 with m = mant24 >> (14-e).
		shift := uint(14 - e)
		if shift > 24 {
			return sign
		}
		m := man | 0x800000
		q := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && q&1 == 1) {
			q++ // may carry into the exponent field, which yields the smallest normal: correct
		}
		return sign | uint16(q)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry out of the mantissa bumps the exponent; from 0x7bff it becomes Inf, as it should
	}
	return sign | uint16(h)
}

// BF16ToF32 converts a bfloat16 value (bit pattern h, the top half of a float32) to float32.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts f to bfloat16 rounding to nearest, ties to even, as ggml does; NaN is kept
// NaN by forcing the quiet bit (truncation could otherwise turn it into Inf).
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// F16ToF32s converts len(src) halves into dst[:len(src)]. dst must be at least as long as src.
func F16ToF32s(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = f16Table[h]
	}
}

// F32ToF16s converts len(src) floats into dst[:len(src)] as F32ToF16 does. dst must be at least
// as long as src. (It stores every K and V row of an F16 KV cache: assembly where there is some.)
func F32ToF16s(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	n := f32ToF16sAsm(dst, src)
	f32ToF16sGo(dst[n:], src[n:])
}

// f32ToF16sGo is F32ToF16s' pure-Go twin.
func f32ToF16sGo(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = F32ToF16(f)
	}
}

// BF16ToF32s converts len(src) bfloat16 values into dst[:len(src)].
func BF16ToF32s(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = BF16ToF32(h)
	}
}

// F32ToBF16s converts len(src) floats to bfloat16 into dst[:len(src)].
func F32ToBF16s(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = F32ToBF16(f)
	}
}
