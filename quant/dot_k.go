package quant

import "encoding/binary"

// q8KCol splits one Q8_K activation super-block (q8_KBytes bytes) into its scale, quants and
// the group sums of 32 elements (bsums[2s] + bsums[2s+1]) used for the K-quant min corrections.
func q8KCol(xb []byte) (d float32, qs []byte, sums32 [8]int32) {
	xb = xb[:q8_KBytes]
	bs := xb[4+QK_K : q8_KBytes]
	for s := 0; s < 8; s++ {
		sums32[s] = int32(int16(binary.LittleEndian.Uint16(bs[4*s:]))) +
			int32(int16(binary.LittleEndian.Uint16(bs[4*s+2:])))
	}
	return f32At(xb), xb[4 : 4+QK_K], sums32
}

// dotKScaleMin accumulates one Q4_K/Q5_K super-block into acc for each column: with the levels
// wq (0..nmax), 6-bit scales sc and mins m per 32-element sub-block, the block contributes
// d*dx*Σ_s sc[s]·(wq·xq)_s − dmin*dx*Σ_s m[s]·Σ_s xq — integer sums, then two float scalings.
func dotKScaleMin(wq *[QK_K]byte, sc, m *[8]uint8, d, dmin float32, x []byte, off, xStride, nx int, acc *[MaxCols]float32) {
	for j := 0; j < nx; j++ {
		o := j*xStride + off
		dx, xq, sums := q8KCol(x[o : o+q8_KBytes])
		var isum, msum int32
		for s := 0; s < 8; s++ {
			isum += int32(sc[s]) * dot32((*[32]byte)(wq[32*s:32*s+32]), (*[32]byte)(xq[32*s:32*s+32]))
			msum += int32(m[s]) * sums[s]
		}
		acc[j] += d*dx*float32(isum) - dmin*dx*float32(msum)
	}
}

// dotKScale16 accumulates one super-block of 16-element groups with an int8 scale each into
// acc for each column (Q3_K, Q6_K and IQ4_XS, whose 32-element sub-blocks repeat their scale):
// with the levels wq as int8 bit patterns the block contributes d*dx*Σ_g sc[g]·(wq·xq)_g.
func dotKScale16(wq *[QK_K]byte, sc *[16]int8, d float32, x []byte, off, xStride, nx int, acc *[MaxCols]float32) {
	for j := 0; j < nx; j++ {
		o := j*xStride + off
		xb := x[o : o+q8_KBytes]
		xq := xb[4 : 4+QK_K]
		var isum int32
		for g := 0; g < 16; g++ {
			isum += int32(sc[g]) * dot16((*[16]byte)(wq[16*g:16*g+16]), (*[16]byte)(xq[16*g:16*g+16]))
		}
		acc[j] += d * f32At(xb) * float32(isum)
	}
}

// dotQ4_KGo is the DotFunc for Q4_K weights with Q8_K activations.
func dotQ4_KGo(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dotKScaleMinGo(false, k, w, x, xStride, nx, out)
}

// dotQ5_KGo is the DotFunc for Q5_K weights with Q8_K activations.
func dotQ5_KGo(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dotKScaleMinGo(true, k, w, x, xStride, nx, out)
}

// dotKScaleMinGo is dotQ4_KGo, or with q5 dotQ5_KGo: the blocks share their scales and mins
// (bytes 4..16) and differ in how the levels are stored (levelsQ4_K, levelsQ5_K).
func dotKScaleMinGo(q5 bool, k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	blockBytes := q4_KBytes
	if q5 {
		blockBytes = q5_KBytes
	}
	var acc [MaxCols]float32
	var wq [QK_K]byte // levels as int8 bit patterns
	var sc, m [8]uint8
	for b := 0; b < k/QK_K; b++ {
		blk := w[b*blockBytes : (b+1)*blockBytes]
		d, dmin := f16At(blk), f16At(blk[2:])
		for s := 0; s < 8; s++ {
			sc[s], m[s] = scaleMinK4(s, blk[4:16])
		}
		if q5 {
			levelsQ5_K(&wq, blk)
		} else {
			levelsQ4_K(&wq, blk)
		}
		dotKScaleMin(&wq, &sc, &m, d, dmin, x, b*q8_KBytes, xStride, nx, &acc)
	}
	copy(out[:nx], acc[:nx])
}

// levelsQ4_K decodes a Q4_K super-block's levels (0..15): group g of 64 elements takes the low
// nibbles of qs[32g:32g+32], then their high nibbles.
func levelsQ4_K(wq *[QK_K]byte, blk []byte) {
	qs := blk[16:144]
	for g := 0; g < 4; g++ {
		q := qs[32*g : 32*g+32]
		lo := wq[64*g : 64*g+32]
		hi := wq[64*g+32 : 64*g+64]
		for l := range q {
			lo[l] = q[l] & 0xf
			hi[l] = q[l] >> 4
		}
	}
}

// levelsQ5_K decodes a Q5_K super-block's levels (0..31): Q4_K's nibbles with a fifth bit from
// qh, bit 2g of qh[l] for element 64g+l and bit 2g+1 for element 64g+32+l.
func levelsQ5_K(wq *[QK_K]byte, blk []byte) {
	qh := blk[16:48]
	qs := blk[48:176]
	for g := 0; g < 4; g++ {
		q := qs[32*g : 32*g+32]
		lo := wq[64*g : 64*g+32]
		hi := wq[64*g+32 : 64*g+64]
		sh := uint(2 * g)
		for l := range q {
			h := qh[l] >> sh
			lo[l] = q[l]&0xf | (h&1)<<4
			hi[l] = q[l]>>4 | (h&2)<<3
		}
	}
}

// dotQ6_KGo is the DotFunc for Q6_K weights with Q8_K activations: levels q-32 in [-32, 31] with an
// int8 scale per 16 elements; per super-block d*dx*Σ_g sc[g]·(wq·xq)_g.
func dotQ6_KGo(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	var acc [MaxCols]float32
	var wq [QK_K]byte // levels as int8 bit patterns
	var sc [16]int8
	for b := 0; b < k/QK_K; b++ {
		blk := w[b*q6_KBytes : (b+1)*q6_KBytes]
		d := f16At(blk[208:])
		for h := 0; h < 2; h++ {
			ql := blk[64*h : 64*h+64]
			qh := blk[128+32*h : 128+32*h+32]
			y := wq[128*h : 128*h+128]
			for l := 0; l < 32; l++ {
				// Wrapping byte subtraction gives the int8 bit pattern of q-32.
				y[l] = (ql[l]&0xf | (qh[l]&3)<<4) - 32
				y[l+32] = (ql[l+32]&0xf | ((qh[l]>>2)&3)<<4) - 32
				y[l+64] = (ql[l]>>4 | ((qh[l]>>4)&3)<<4) - 32
				y[l+96] = (ql[l+32]>>4 | ((qh[l]>>6)&3)<<4) - 32
			}
		}
		for g := range sc {
			sc[g] = int8(blk[192+g])
		}
		dotKScale16(&wq, &sc, d, x, b*q8_KBytes, xStride, nx, &acc)
	}
	copy(out[:nx], acc[:nx])
}
