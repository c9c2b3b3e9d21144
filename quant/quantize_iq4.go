package quant

import "encoding/binary"

// iq4Tries is how far ggml's IQ4 quantizer perturbs the inverse scale (±7 steps), as
// llama-quantize runs it (quantize_iq4_nl / quantize_iq4_xs without an importance matrix).
const iq4Tries = 7

// bestIndexIQ4 returns the index of the iq4Values entry nearest to f (ties to the larger), like
// ggml's best_index_int8: a branch-free binary search over the midpoints, compared doubled so
// that both sides are exact. NaN gives 0.
func bestIndexIQ4(f float32) int {
	f2 := f + f
	idx := 0
	for step := 8; step > 0; step >>= 1 {
		j := idx + step
		if f2 >= float32(int32(iq4Values[j-1])+int32(iq4Values[j])) {
			idx = j
		}
	}
	return idx
}

// fitIQ4 fits one 32-element sub-block x ≈ d*iq4Values[L] with weights x² as ggml's
// quantize_row_iq4_nl_impl does: the grid that maps the value of largest magnitude to ±127, then
// 2*iq4Tries+1 perturbed inverse scales, each refitted by weighted least squares; it returns the
// best d (0 for an all-zero sub-block) without writing levels.
func fitIQ4(x []float32) float32 {
	x = x[:32]
	mx := signedMax(x)
	if abs32(mx) < groupMaxEps {
		return 0
	}
	first := float32(iq4Values[0])
	id := 1 / (-mx / first)
	var sumQX, sumQ2 float32
	for _, v := range x {
		q := float32(iq4Values[bestIndexIQ4(id*v)])
		w := v * v
		sumQX += w * q * v
		sumQ2 += w * q * q
	}
	var d float32
	if sumQ2 > 0 {
		d = sumQX / sumQ2
	}
	best := d * sumQX
	for try := -iq4Tries; try <= iq4Tries; try++ {
		id = (float32(try) + first) / mx
		sumQX, sumQ2 = 0, 0
		for _, v := range x {
			q := float32(iq4Values[bestIndexIQ4(id*v)])
			w := v * v
			sumQX += w * q * v
			sumQ2 += w * q * q
		}
		if sumQ2 > 0 && sumQX*sumQX > best*sumQ2 {
			d = sumQX / sumQ2
			best = d * sumQX
		}
	}
	return d
}

// iq4Levels sets l to the nearest table indexes of id*x.
func iq4Levels(l *[32]byte, x []float32, id float32) {
	for j, v := range x[:32] {
		l[j] = byte(bestIndexIQ4(id * v))
	}
}

// quantizeIQ4NL quantizes IQ4_NL blocks: d from fitIQ4, stored as f16, and the levels nearest
// to x/d (with d before the f16 rounding, as ggml does).
func quantizeIQ4NL(src []float32, dst []byte) {
	var l [32]byte
	eachBlock(src, dst, 32, iq4NLBytes, func(x []float32, blk []byte) {
		d := fitIQ4(x)
		binary.LittleEndian.PutUint16(blk, F32ToF16(d))
		iq4Levels(&l, x, inv(d))
		packNibbles32(blk[2:18], nil, &l)
	})
}

// quantizeIQ4XS quantizes IQ4_XS super-blocks: each sub-block's d from fitIQ4, the eight scales
// quantized to [-32, 31] against the super-scale -max/32 (max: the scale of largest magnitude),
// and each sub-block's levels nearest to x/(super-scale*scale), all unrounded as in ggml.
func quantizeIQ4XS(src []float32, dst []byte) {
	var l [32]byte
	var scales [8]float32
	eachBlock(src, dst, QK_K, iq4XSBytes, func(x []float32, blk []byte) {
		for ib := range scales {
			scales[ib] = fitIQ4(x[32*ib : 32*ib+32])
		}
		d := -signedMax(scales[:]) / 32
		binary.LittleEndian.PutUint16(blk, F32ToF16(d))
		id := inv(d)
		var sh uint16
		for ib := range scales {
			ls := clamp32(nearestInt(id*scales[ib]), -32, 31)
			iq4Levels(&l, x[32*ib:32*ib+32], inv(d*float32(ls)))
			packNibbles32(blk[8+16*ib:24+16*ib], nil, &l)
			u := byte(ls + 32)
			if ib%2 == 0 {
				blk[4+ib/2] = u & 0xf
			} else {
				blk[4+ib/2] |= (u & 0xf) << 4
			}
			sh |= uint16(u>>4) << (2 * ib)
		}
		binary.LittleEndian.PutUint16(blk[2:], sh)
	})
}
