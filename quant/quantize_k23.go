package quant

import "encoding/binary"

// packCrumbs256 stores 256 levels (< 4 after masking) in the 2-bit order crumbs256 reads.
func packCrumbs256(qs []byte, l *[QK_K]byte) {
	qs = qs[:64]
	for h := 0; h < 2; h++ {
		y := l[128*h : 128*h+128]
		for i := 0; i < 32; i++ {
			qs[32*h+i] = y[i]&3 | (y[i+32]&3)<<2 | (y[i+64]&3)<<4 | (y[i+96]&3)<<6
		}
	}
}

// quantizeQ2_K follows quantize_row_q2_K_ref: each 16-element group is fitted by makeQKX2Quants
// (nmax 3, weights |x|, rmin -0.5, 15 steps, absolute error); the 16 scales and 16 mins are
// quantized to 4 bits against f16 super-scales max/15, and the elements requantized to [0, 3]
// with the rounded scales.
func quantizeQ2_K(src []float32, dst []byte) {
	var l [QK_K]byte
	var laux [16]uint8
	var weights, scales, mins [16]float32
	eachBlock(src, dst, QK_K, q2_KBytes, func(x []float32, blk []byte) {
		var maxScale, maxMin float32
		for g := 0; g < 16; g++ {
			xs := x[16*g : 16*g+16]
			for i, v := range xs {
				weights[i] = abs32(v)
			}
			scales[g], mins[g] = makeQKX2Quants(3, xs, weights[:], l[16*g:16*g+16], laux[:], -0.5, 0.1, 15, true)
			maxScale = max(maxScale, scales[g])
			maxMin = max(maxMin, mins[g])
		}
		sc := blk[:16]
		if maxScale > 0 {
			iscale := 15 / maxScale
			for g := range sc {
				sc[g] = byte(clamp32(nearestInt(iscale*scales[g]), 0, 15))
			}
			binary.LittleEndian.PutUint16(blk[80:], F32ToF16(maxScale/15))
		}
		if maxMin > 0 {
			iscale := 15 / maxMin
			for g := range sc {
				sc[g] |= byte(clamp32(nearestInt(iscale*mins[g]), 0, 15)) << 4
			}
			binary.LittleEndian.PutUint16(blk[82:], F32ToF16(maxMin/15))
		}
		d, dmin := f16At(blk[80:]), f16At(blk[82:])
		for g := 0; g < 16; g++ {
			dl := d * float32(sc[g]&0xf)
			if dl == 0 {
				continue // keep the fitted levels; they are multiplied by 0 anyway
			}
			ml := dmin * float32(sc[g]>>4)
			for i, v := range x[16*g : 16*g+16] {
				l[16*g+i] = byte(clamp32(nearestInt((v+ml)/dl), 0, 3))
			}
		}
		packCrumbs256(blk[16:80], &l)
	})
}

// makeQ3Quants fits x ≈ scale*(L - nmax) with L in [0, 2*nmax) following ggml's make_q3_quants
// with do_rmse: start from the grid that maps the value of largest magnitude to -nmax, then move
// single levels while that improves the x²-weighted least-squares fit (at most 5 passes).
// len(l) == len(x).
func makeQ3Quants(nmax int32, x []float32, l []int8) float32 {
	l = l[:len(x)]
	_, sumLX, sumL2, ok := symmetricStart(nmax, x, l, 0)
	if !ok {
		return 0
	}
	for range 5 {
		changed := false
		for i, v := range x {
			w := v * v
			li := float32(l[i])
			slx := sumLX - w*v*li
			if !(slx > 0) {
				continue
			}
			sl2 := sumL2 - w*li*li
			nl := clamp32(nearestInt(v*sl2/slx), -nmax, nmax-1)
			if nl == int32(l[i]) {
				continue
			}
			fl := float32(nl)
			slx += w * v * fl
			sl2 += w * fl * fl
			if sl2 > 0 && slx*slx*sumL2 > sumLX*sumLX*sl2 {
				l[i], sumLX, sumL2 = int8(nl), slx, sl2
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	for i := range l {
		l[i] += int8(nmax)
	}
	if sumL2 > 0 {
		return sumLX / sumL2
	}
	return 0
}

// packScalesQ3_K stores 16 scales (each + 32, in [0, 63]) in the 12-byte layout scalesQ3_K reads.
func packScalesQ3_K(s []byte, ls *[16]byte) {
	s = s[:12]
	clear(s)
	for g, v := range ls {
		s[g%8] |= (v & 0xf) << (4 * (g / 8))
		s[8+g%4] |= (v >> 4) << (2 * (g / 4))
	}
}

// quantizeQ3_K follows quantize_row_q3_K_ref: each 16-element group is fitted by makeQ3Quants
// (nmax 4); the 16 signed scales are quantized to [-32, 31] against an f16 super-scale that maps
// the one of largest magnitude to -32, and the elements requantized to [-4, 3]. Bit 2 of each
// level goes to hmask (element e: bit e/32 of hmask[e%32]), the low two bits to qs.
func quantizeQ3_K(src []float32, dst []byte) {
	var l [QK_K]int8
	var lu [QK_K]byte
	var scales [16]float32
	var ls [16]byte
	var sc [16]int8
	eachBlock(src, dst, QK_K, q3_KBytes, func(x []float32, blk []byte) {
		for g := 0; g < 16; g++ {
			scales[g] = makeQ3Quants(4, x[16*g:16*g+16], l[16*g:16*g+16])
		}
		if maxScale := signedMax(scales[:]); maxScale != 0 {
			iscale := -32 / maxScale
			for g := range ls {
				ls[g] = byte(clamp32(nearestInt(iscale*scales[g]), -32, 31) + 32)
			}
			packScalesQ3_K(blk[96:108], &ls)
			binary.LittleEndian.PutUint16(blk[108:], F32ToF16(1/iscale))
		}
		d := f16At(blk[108:])
		scalesQ3_K(&sc, blk[96:108])
		for g := 0; g < 16; g++ {
			dl := d * float32(sc[g])
			if dl == 0 {
				continue
			}
			for i, v := range x[16*g : 16*g+16] {
				l[16*g+i] = int8(clamp32(nearestInt(v/dl), -4, 3) + 4)
			}
		}
		hm := blk[:32]
		for e, v := range l {
			if v > 3 {
				hm[e%32] |= 1 << (e / 32)
				v -= 4
			}
			lu[e] = byte(v)
		}
		packCrumbs256(blk[32:96], &lu)
	})
}
