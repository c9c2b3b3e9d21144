package quant

import (
	"encoding/binary"
	"math"
)

// truncLevel truncates f toward zero and clamps it to [0, top], as ggml's reference quantizers do
// with MIN(top, (int8_t)(v + 0.5)); NaN gives 0.
func truncLevel(f float32, top byte) byte {
	if !(f > 0) {
		return 0
	}
	if f >= float32(top) {
		return top
	}
	return byte(f)
}

// minMax returns the smallest and largest of x, as ggml's comparisons find them (NaNs skipped).
func minMax(x []float32) (mn, mx float32) {
	mn, mx = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < mn {
			mn = v
		}
		if v > mx {
			mx = v
		}
	}
	return mn, mx
}

// signedMax returns the value of largest magnitude in x (0 if none).
func signedMax(x []float32) float32 {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	return mx
}

// inv is 1/d, or 0 for d == 0.
func inv(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

// packNibbles32 stores 32 levels (< 16 after masking) in ggml's 4-bit order: qs[j] holds level j
// in its low nibble and level j+16 in its high nibble. With qh != nil bit 4 of level j goes to bit
// j of the little-endian uint32 at qh.
func packNibbles32(qs, qh []byte, l *[32]byte) {
	qs = qs[:16]
	var h uint32
	for j := range qs {
		qs[j] = l[j]&0xf | (l[j+16]&0xf)<<4
	}
	if qh != nil {
		for j, v := range l {
			h |= uint32(v>>4&1) << j
		}
		binary.LittleEndian.PutUint32(qh, h)
	}
}

// quantizeMin32 follows quantize_row_q4_1_ref (top 15) and quantize_row_q5_1_ref (top 31):
// d = (max-min)/top, m = min, l = trunc((x-min)/d + 0.5) clamped to [0, top]. Q4_1 blocks
// (top 15) hold qs at 4; Q5_1 blocks hold qh at 4 and qs at 8.
func quantizeMin32(src []float32, dst []byte, blockBytes int, top byte) {
	var l [32]byte
	eachBlock(src, dst, 32, blockBytes, func(x []float32, blk []byte) {
		mn, mx := minMax(x)
		d := (mx - mn) / float32(top)
		id := inv(d)
		binary.LittleEndian.PutUint16(blk, F32ToF16(d))
		binary.LittleEndian.PutUint16(blk[2:], F32ToF16(mn))
		for j, v := range x {
			// The conversion rounds the product before the addition, as the reference does.
			l[j] = truncLevel(float32((v-mn)*id)+0.5, top)
		}
		if top == 15 {
			packNibbles32(blk[4:20], nil, &l)
		} else {
			packNibbles32(blk[8:24], blk[4:8], &l)
		}
	})
}

// quantizeQ5_0 follows quantize_row_q5_0_ref: d = max/-16 where max is the value of largest
// magnitude, l = min(31, trunc(x/d + 16.5)), value = d*(l-16).
func quantizeQ5_0(src []float32, dst []byte) {
	var l [32]byte
	eachBlock(src, dst, 32, q5_0Bytes, func(x []float32, blk []byte) {
		d := signedMax(x) / -16
		id := inv(d)
		binary.LittleEndian.PutUint16(blk, F32ToF16(d))
		for j, v := range x {
			l[j] = truncLevel(float32(v*id)+16.5, 31)
		}
		packNibbles32(blk[6:22], blk[2:6], &l)
	})
}
