package quant

import (
	"encoding/binary"
	"math"
)

// groupMaxEps is ggml's GROUP_MAX_EPS: groups whose largest magnitude is below it quantize to 0.
const groupMaxEps = 1e-15

// makeQKX2Quants fits x ≈ scale*L - theMin with L in [0, nmax] (an asymmetric quantizer with the
// offset forced <= 0, i.e. theMin >= 0), minimising the weighted squared error (or, if useMad,
// the weighted absolute error). It follows ggml's make_qkx2_quants: start from the min/max grid,
// then try nstep+1 perturbed inverse scales (nmax + rmin + rdelta*is)/(max-min) and refit scale
// and min by weighted least squares for each, keeping the best by the chosen error.
// len(x) == len(weights) == len(l) == len(laux).
func makeQKX2Quants(nmax int32, x, weights []float32, l, laux []uint8, rmin, rdelta float32, nstep int, useMad bool) (scale, theMin float32) {
	n := len(x)
	weights, l, laux = weights[:n], l[:n], laux[:n]
	mn, mx := x[0], x[0]
	sumW := weights[0]
	sumX := sumW * x[0]
	for i := 1; i < n; i++ {
		mn = min(mn, x[i])
		mx = max(mx, x[i])
		sumW += weights[i]
		sumX += weights[i] * x[i]
	}
	mn = min(mn, 0)
	if mx == mn {
		clear(l)
		return 0, -mn
	}
	iscale := float32(nmax) / (mx - mn)
	scale = 1 / iscale
	var bestErr float32
	for i, v := range x {
		q := uint8(clamp32(nearestInt(iscale*(v-mn)), 0, nmax))
		l[i] = q
		bestErr += fitErr(weights[i], scale*float32(q)+mn-v, useMad)
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + rdelta*float32(is) + float32(nmax)) / (mx - mn)
		var sumL, sumL2, sumXL float32
		for i, v := range x {
			q := clamp32(nearestInt(iscale*(v-mn)), 0, nmax)
			laux[i] = uint8(q)
			w := weights[i]
			fq := float32(q)
			sumL += w * fq
			sumL2 += w * fq * fq
			sumXL += w * fq * v
		}
		det := sumW*sumL2 - sumL*sumL
		if !(det > 0) {
			continue
		}
		thisScale := (sumW*sumXL - sumX*sumL) / det
		thisMin := (sumL2*sumX - sumL*sumXL) / det
		if thisMin > 0 {
			thisMin = 0
			thisScale = sumXL / sumL2
		}
		var curErr float32
		for i, v := range x {
			curErr += fitErr(weights[i], thisScale*float32(laux[i])+thisMin-v, useMad)
		}
		if curErr < bestErr {
			copy(l, laux)
			bestErr, scale, mn = curErr, thisScale, thisMin
		}
	}
	return scale, -mn
}

// fitErr is makeQKX2Quants' weighted error for one residual: w·|diff| or w·diff², multiplied in
// ggml's order.
func fitErr(w, diff float32, useMad bool) float32 {
	if useMad {
		return w * abs32(diff)
	}
	return w * diff * diff
}

// gridFit rounds each x[i] to the grid of step 1/iscale, as a level q in [-nmax, nmax), and
// returns the x²-weighted sums Σw·x·q and Σw·q² that a least-squares scale is their ratio of;
// it writes q+offset to l unless l is nil. len(l) == len(x).
func gridFit(x []float32, iscale float32, nmax int32, l []int8, offset int32) (sumLX, sumL2 float32) {
	for i, v := range x {
		q := clamp32(nearestInt(iscale*v), -nmax, nmax-1)
		if l != nil {
			l[i] = int8(q + offset)
		}
		w := v * v
		sumLX += w * v * float32(q)
		sumL2 += w * float32(q) * float32(q)
	}
	return sumLX, sumL2
}

// symmetricStart is where the symmetric fits (makeQXQuants, makeQ3Quants) start: the grid that
// maps the value of largest magnitude mx to -nmax, its levels plus off in l and their sums
// (gridFit). For an x of no magnitude ok is false and l is cleared: the fit's scale is 0.
// len(l) >= len(x).
func symmetricStart(nmax int32, x []float32, l []int8, off int32) (mx, sumLX, sumL2 float32, ok bool) {
	l = l[:len(x)]
	mx = signedMax(x)
	if abs32(mx) < groupMaxEps {
		clear(l)
		return mx, 0, 0, false
	}
	sumLX, sumL2 = gridFit(x, -float32(nmax)/mx, nmax, l, off)
	return mx, sumLX, sumL2, true
}

// makeQXQuants fits x ≈ scale*(L - nmax) with L in [0, 2*nmax) (a symmetric quantizer), following
// ggml's make_qx_quants with rmse_type=1 (weights x²) and no importance: start from the grid that
// maps the largest-magnitude value to -nmax, then try 18 perturbed grids and keep the one with the
// best weighted least-squares fit. len(l) == len(x).
func makeQXQuants(nmax int32, x []float32, l []int8) float32 {
	mx, sumLX, sumL2, ok := symmetricStart(nmax, x, l, nmax)
	if !ok {
		return 0
	}
	var scale float32
	if sumL2 != 0 {
		scale = sumLX / sumL2
	}
	best := scale * sumLX
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale := -(float32(nmax) + 0.1*float32(is)) / mx
		sumLX, sumL2 = gridFit(x, iscale, nmax, nil, 0)
		if sumL2 > 0 && sumLX*sumLX > best*sumL2 {
			gridFit(x, iscale, nmax, l, nmax)
			scale = sumLX / sumL2
			best = scale * sumLX
		}
	}
	return scale
}

// packScalesK4 stores eight 6-bit scales and mins into the 12-byte Q4_K/Q5_K layout that
// scaleMinK4 reads.
func packScalesK4(dst []byte, ls, lm *[8]uint8) {
	dst = dst[:12]
	for j := 0; j < 4; j++ {
		dst[j] = ls[j]
		dst[j+4] = lm[j]
	}
	for j := 4; j < 8; j++ {
		dst[j+4] = ls[j]&0xf | (lm[j]&0xf)<<4
		dst[j-4] |= (ls[j] >> 4) << 6
		dst[j] |= (lm[j] >> 4) << 6
	}
}

// quantizeKScaleMin runs the shared Q4_K/Q5_K super-block quantizer on x (256 values): fit each
// 32-element sub-block with makeQKX2Quants, quantize the 8 scales and 8 mins to 6 bits against
// f16 super-scales, then requantize every element to [0, nmax] with the rounded scales. It writes
// d, dmin and the packed scales to hdr[0:16] and returns the levels in l.
func quantizeKScaleMin(x []float32, hdr []byte, l *[QK_K]uint8, nmax int32, rmin float32, nstep int) {
	var scales, mins [8]float32
	var weights [32]float32
	var laux [32]uint8
	var maxScale, maxMin float32
	for j := 0; j < 8; j++ {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += v * v
		}
		avX := float32(math.Sqrt(float64(sumX2 / 32)))
		for i, v := range xs {
			weights[i] = avX + abs32(v)
		}
		scales[j], mins[j] = makeQKX2Quants(nmax, xs, weights[:], l[32*j:32*j+32], laux[:], rmin, 0.1, nstep, false)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	var ls, lm [8]uint8
	for j := 0; j < 8; j++ {
		ls[j] = uint8(clamp32(nearestInt(invScale*scales[j]), 0, 63))
		lm[j] = uint8(clamp32(nearestInt(invMin*mins[j]), 0, 63))
	}
	dh, mh := F32ToF16(maxScale/63), F32ToF16(maxMin/63)
	binary.LittleEndian.PutUint16(hdr[0:], dh)
	binary.LittleEndian.PutUint16(hdr[2:], mh)
	packScalesK4(hdr[4:16], &ls, &lm)
	d, dmin := F16ToF32(dh), F16ToF32(mh)
	for j := 0; j < 8; j++ {
		sd := d * float32(ls[j])
		if sd == 0 {
			continue // keep the levels from the fit; they are multiplied by 0 anyway
		}
		dm := dmin * float32(lm[j])
		for i, v := range x[32*j : 32*j+32] {
			l[32*j+i] = uint8(clamp32(nearestInt((v+dm)/sd), 0, nmax))
		}
	}
}

// quantizeQ4_K follows quantize_row_q4_K_ref (make_qkx2_quants with nmax 15, rmin -1, 20 steps).
func quantizeQ4_K(src []float32, dst []byte) {
	var l [QK_K]uint8
	eachBlock(src, dst, QK_K, q4_KBytes, func(x []float32, blk []byte) {
		quantizeKScaleMin(x, blk, &l, 15, -1, 20)
		qs := blk[16:144]
		for g := 0; g < 4; g++ {
			for i := 0; i < 32; i++ {
				qs[32*g+i] = l[64*g+i] | l[64*g+32+i]<<4
			}
		}
	})
}

// quantizeQ5_K follows quantize_row_q5_K_ref (make_qkx2_quants with nmax 31, rmin -0.5, 15
// steps); the fifth bit of each level goes to qh.
func quantizeQ5_K(src []float32, dst []byte) {
	var l [QK_K]uint8
	eachBlock(src, dst, QK_K, q5_KBytes, func(x []float32, blk []byte) {
		quantizeKScaleMin(x, blk, &l, 31, -0.5, 15)
		qh := blk[16:48]
		qs := blk[48:176]
		for g := 0; g < 4; g++ {
			for i := 0; i < 32; i++ {
				l1, l2 := l[64*g+i], l[64*g+32+i]
				qh[i] |= (l1>>4)<<(2*g) | (l2>>4)<<(2*g+1)
				qs[32*g+i] = l1&0xf | (l2&0xf)<<4
			}
		}
	})
}

// quantizeQ6_K follows quantize_row_q6_K_ref: each 16-element group is fitted with makeQXQuants
// (nmax 32), the 16 group scales are quantized to int8 against an f16 super-scale that maps the
// largest-magnitude scale to -128, and the elements are requantized to [-32, 31] with them.
func quantizeQ6_K(src []float32, dst []byte) {
	var l [QK_K]int8
	var scales [16]float32
	eachBlock(src, dst, QK_K, q6_KBytes, func(x []float32, blk []byte) {
		for g := 0; g < 16; g++ {
			scales[g] = makeQXQuants(32, x[16*g:16*g+16], l[16*g:16*g+16])
		}
		maxScale := signedMax(scales[:])
		if abs32(maxScale) < groupMaxEps {
			return // all-zero block, d = 0
		}
		iscale := -128 / maxScale
		dh := F32ToF16(1 / iscale)
		binary.LittleEndian.PutUint16(blk[208:], dh)
		d := F16ToF32(dh)
		sc := blk[192:208]
		for g := 0; g < 16; g++ {
			sc[g] = byte(int8(clamp32(nearestInt(iscale*scales[g]), -128, 127)))
		}
		for g := 0; g < 16; g++ {
			sd := d * float32(int8(sc[g]))
			if sd == 0 {
				continue
			}
			for i, v := range x[16*g : 16*g+16] {
				l[16*g+i] = int8(clamp32(nearestInt(v/sd), -32, 31) + 32)
			}
		}
		for h := 0; h < 2; h++ {
			ql := blk[64*h : 64*h+64]
			qh := blk[128+32*h : 128+32*h+32]
			lh := l[128*h : 128*h+128]
			for i := 0; i < 32; i++ {
				q1, q2, q3, q4 := uint8(lh[i]), uint8(lh[i+32]), uint8(lh[i+64]), uint8(lh[i+96])
				ql[i] = q1&0xf | (q3&0xf)<<4
				ql[i+32] = q2&0xf | (q4&0xf)<<4
				qh[i] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
			}
		}
	})
}
