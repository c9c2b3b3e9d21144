package quant

import "encoding/binary"

// The 256-element super-block types Q2_K, Q3_K and IQ4_XS (layouts from ggml-common.h), all
// dotted with Q8_K activations as in llama.cpp.
const (
	q2_KBytes  = 84  // uint8 scales[16] (scale low nibble, min high nibble), uint8 qs[64], f16 d, f16 dmin
	q3_KBytes  = 110 // uint8 hmask[32], uint8 qs[64], uint8 scales[12] (16 6-bit scales), f16 d
	iq4XSBytes = 136 // f16 d, uint16 scales_h, uint8 scales_l[4], uint8 qs[128]
)

// crumbs256 writes the 2-bit fields of a Q2_K/Q3_K super-block (qs, 64 bytes) to l: element
// 128h + 32j + i is bits 2j..2j+1 of qs[32h+i].
func crumbs256(l *[QK_K]byte, qs []byte) {
	qs = qs[:64]
	for h := 0; h < 2; h++ {
		q := qs[32*h : 32*h+32]
		for j := 0; j < 4; j++ {
			y := l[128*h+32*j : 128*h+32*j+32]
			for i := range y {
				y[i] = q[i] >> (2 * j) & 3
			}
		}
	}
}

// levelsQ3_K decodes a Q3_K super-block into int8 bit patterns of its levels in [-4, 3]: the
// 2-bit field, minus 4 unless element 128h + 32j + i has bit 4h+j of hmask[i] set.
func levelsQ3_K(l *[QK_K]byte, blk []byte) {
	crumbs256(l, blk[32:96])
	hm := blk[:32]
	for b := 0; b < 8; b++ {
		y := l[32*b : 32*b+32]
		for i := range y {
			y[i] -= (^hm[i] >> b & 1) << 2
		}
	}
}

// scalesQ3_K unpacks the 16 6-bit scales of a Q3_K super-block (12 bytes) minus 32: scale g keeps
// its low 4 bits in byte g (g < 8, low nibble) or g-8 (high nibble), and its top 2 bits in
// bits 2(g/4)..2(g/4)+1 of byte 8 + g%4.
func scalesQ3_K(sc *[16]int8, s []byte) {
	s = s[:12]
	for g := 0; g < 16; g++ {
		lo := s[g%8] >> (4 * (g / 8)) & 0xf
		hi := s[8+g%4] >> (2 * (g / 4)) & 3
		sc[g] = int8(lo|hi<<4) - 32
	}
}

// scalesIQ4XS returns the 6-bit scale of 32-element sub-block ib of an IQ4_XS super-block,
// minus 32: the low 4 bits are nibble ib of scales_l, the top 2 bits are bits 2ib..2ib+1 of
// scales_h.
func scalesIQ4XS(blk []byte, ib int) int32 {
	lo := blk[4+ib/2] >> (4 * (ib % 2)) & 0xf
	hi := binary.LittleEndian.Uint16(blk[2:]) >> (2 * ib) & 3
	return (int32(lo) | int32(hi)<<4) - 32
}

// levelsIQ4XS decodes an IQ4_XS super-block to its table values (int8 bit patterns): sub-block ib
// uses qs[16ib:16ib+16], low nibbles first.
func levelsIQ4XS(l *[QK_K]byte, blk []byte) {
	qs := blk[8:136]
	for ib := 0; ib < 8; ib++ {
		q := qs[16*ib : 16*ib+16]
		y := l[32*ib : 32*ib+32]
		for i, v := range q {
			y[i] = byte(iq4Values[v&0xf])
			y[i+16] = byte(iq4Values[v>>4])
		}
	}
}

// dequantQ2_K expands Q2_K super-blocks: element e is d*(scales[e/16]&15)*q - dmin*(scales[e/16]>>4).
func dequantQ2_K(src []byte, dst []float32) {
	var l [QK_K]byte
	eachDequant(src, dst, QK_K, q2_KBytes, func(blk []byte, y []float32) {
		d, dmin := f16At(blk[80:]), f16At(blk[82:])
		crumbs256(&l, blk[16:80])
		for g := 0; g < 16; g++ {
			dl, ml := d*float32(blk[g]&0xf), dmin*float32(blk[g]>>4)
			for i := 16 * g; i < 16*g+16; i++ {
				y[i] = dl*float32(l[i]) - ml
			}
		}
	})
}

// dequantQ3_K expands Q3_K super-blocks: element e is d*scale[e/16]*level.
func dequantQ3_K(src []byte, dst []float32) {
	var l [QK_K]byte
	var sc [16]int8
	eachDequant(src, dst, QK_K, q3_KBytes, func(blk []byte, y []float32) {
		d := f16At(blk[108:])
		levelsQ3_K(&l, blk)
		scalesQ3_K(&sc, blk[96:108])
		for g := 0; g < 16; g++ {
			dl := d * float32(sc[g])
			for i := 16 * g; i < 16*g+16; i++ {
				y[i] = dl * float32(int8(l[i]))
			}
		}
	})
}

// dequantIQ4XS expands IQ4_XS super-blocks: element e is d*scale[e/32]*iq4Values[nibble].
func dequantIQ4XS(src []byte, dst []float32) {
	var l [QK_K]byte
	eachDequant(src, dst, QK_K, iq4XSBytes, func(blk []byte, y []float32) {
		d := f16At(blk)
		levelsIQ4XS(&l, blk)
		for ib := 0; ib < 8; ib++ {
			dl := d * float32(scalesIQ4XS(blk, ib))
			for i := 32 * ib; i < 32*ib+32; i++ {
				y[i] = dl * float32(int8(l[i]))
			}
		}
	})
}

// dotQ2_KGo is the DotFunc for Q2_K weights with Q8_K activations: per super-block
// d*dx*Σ_g sc[g]·(levels·quants)_g − dmin*dx*Σ_g m[g]·bsums[g] over the 16-element groups g.
func dotQ2_KGo(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	var acc [MaxCols]float32
	var wq [QK_K]byte
	for b := 0; b < k/QK_K; b++ {
		blk := w[b*q2_KBytes : (b+1)*q2_KBytes]
		d, dmin := f16At(blk[80:]), f16At(blk[82:])
		sc := blk[:16]
		crumbs256(&wq, blk[16:80])
		for j := 0; j < nx; j++ {
			o := j*xStride + b*q8_KBytes
			xb := x[o : o+q8_KBytes]
			xq := xb[4 : 4+QK_K]
			var isum, msum int32
			for g := 0; g < 16; g++ {
				isum += int32(sc[g]&0xf) * dot16((*[16]byte)(wq[16*g:16*g+16]), (*[16]byte)(xq[16*g:16*g+16]))
				msum += int32(sc[g]>>4) * q8KBsum(xb, g)
			}
			dx := f32At(xb)
			acc[j] += d*dx*float32(isum) - dmin*dx*float32(msum)
		}
	}
	copy(out[:nx], acc[:nx])
}

// dotQ3_KGo is the DotFunc for Q3_K weights with Q8_K activations: per super-block
// d*dx*Σ_g scale[g]·(levels·quants)_g.
func dotQ3_KGo(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	var acc [MaxCols]float32
	var wq [QK_K]byte
	var sc [16]int8
	for b := 0; b < k/QK_K; b++ {
		blk := w[b*q3_KBytes : (b+1)*q3_KBytes]
		d := f16At(blk[108:])
		levelsQ3_K(&wq, blk)
		scalesQ3_K(&sc, blk[96:108])
		dotKScale16(&wq, &sc, d, x, b*q8_KBytes, xStride, nx, &acc)
	}
	copy(out[:nx], acc[:nx])
}

// dotIQ4XSGo is the DotFunc for IQ4_XS weights with Q8_K activations: per super-block
// d*dx*Σ_ib scale[ib]·(values·quants)_ib over the 32-element sub-blocks ib.
func dotIQ4XSGo(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	var acc [MaxCols]float32
	var wq [QK_K]byte
	var sc [16]int8 // per 16 elements: each sub-block's scale twice
	for b := 0; b < k/QK_K; b++ {
		blk := w[b*iq4XSBytes : (b+1)*iq4XSBytes]
		d := f16At(blk)
		levelsIQ4XS(&wq, blk)
		for ib := 0; ib < 8; ib++ {
			sc[2*ib] = int8(scalesIQ4XS(blk, ib)) // in [-32, 31]
			sc[2*ib+1] = sc[2*ib]
		}
		dotKScale16(&wq, &sc, d, x, b*q8_KBytes, xStride, nx, &acc)
	}
	copy(out[:nx], acc[:nx])
}
