package quant

import "encoding/binary"

// Packed Q4_K and Q6_K weights: the K-quant counterpart of the Q4_0/Q8_0 panels in packed.go. A
// panel again holds 8 rows, one per dword lane, and occupies exactly the bytes of those 8 rows in
// the file; within it, super-block b of the 8 rows (8·144 bytes for Q4_K, 8·210 for Q6_K) sits at
// b times that size, so a kernel streams one pointer. The levels are the file's, only moved; the
// scales are repacked losslessly (same bits, other places) so that the kernels get the 8 rows'
// scales of a sub-block into the lanes with one shuffle.
//
// Q4_K panel super-block (1152 bytes; r is the row 0..7, all multi-byte values little-endian):
//
//	[0, 16)      d of row r (f16) at 2r
//	[16, 32)     dmin of row r (f16) at 16+2r
//	[32, 128)    the 6-bit scales sc_s and mins m_s (s = 0..7) of the 8 rows, as four 32-byte
//	             vectors U_0..U_3 with byte 4r+v of U_q = [sc_2q, m_2q, sc_2q+1, m_2q+1][v] of row
//	             r, stored as A (32 bytes) = U_0&15 | (U_1&15)<<4, B = U_2&15 | (U_3&15)<<4 and
//	             C = U_0>>4 | (U_1>>4)<<2 | (U_2>>4)<<4 | (U_3>>4)<<6 (bytewise)
//	[128, 1152)  32 chunks of 32 bytes; chunk 4s+c (sub-block s, c = 0..3) holds at byte 4r+i the
//	             level (0..15) of row r's element 32s+4c+i in the low nibble and of element
//	             32s+16+4c+i in the high nibble
//
// Q6_K panel super-block (1680 bytes):
//
//	[0, 16)      d of row r (f16) at 2r
//	[16, 144)    the int8 scales of the 16 groups of 16 elements: group 2i+e of row r at
//	             16+16i+2r+e (so 16 bytes sign-extended to int16 give each row's pair of scales
//	             for groups 2i and 2i+1 in its dword)
//	[144, 1680)  16 units of 96 bytes, one per group u, as chunks P, Q, R of 32 bytes: byte 4r+i of
//	             P, Q, R holds in bits 0-5 the level (0..63, the weight is level-32) of row r's
//	             element 16u+i, 16u+4+i, 16u+8+i respectively, and in bits 6-7 bits 0-1, 2-3, 4-5
//	             of the level of element 16u+12+i
//
// With these, a chunk's 32 bytes hold the same 4 elements of all 8 rows, so VPMADDUBSW against 4
// broadcast activation bytes leaves each row's pair sums in its lane, and the sub-block sums
// accumulate vertically in 16 bits (Q4_K: 16 products <= 15·128 per word; Q6_K: 4 <= 63·128)
// before one VPMADDWD by the scale pair. The Q4_K mins and the Q6_K level offset 32 are applied,
// as by the row kernels, through the Q8_K bsums.

const (
	q4KPanelBytes = PanelRows * q4_KBytes // one super-block of a packed Q4_K panel
	q6KPanelBytes = PanelRows * q6_KBytes // one super-block of a packed Q6_K panel
)

// packQ4KRows and packQ6KRows are PackRows for Q4_K and Q6_K, whose shapes PackRows has checked.
func packQ4KRows(wt Type, k int, dst, src []byte) error {
	packKRows(wt, k, dst, src, packQ4KRow)
	return nil
}

func packQ6KRows(wt Type, k int, dst, src []byte) error {
	packKRows(wt, k, dst, src, packQ6KRow)
	return nil
}

// packKRows rearranges the super-blocks of every panel, each row's with packRow.
func packKRows(wt Type, k int, dst, src []byte, packRow func(sb []byte, r int, blk []byte)) {
	rowBytes := wt.RowSize(k)
	panel := PanelRows * rowBytes
	nb, bs := k/QK_K, wt.TypeSize()
	for p := 0; p < len(src); p += panel {
		s, d := src[p:p+panel], dst[p:p+panel]
		for b := 0; b < nb; b++ {
			sb := d[b*PanelRows*bs : (b+1)*PanelRows*bs]
			for r := 0; r < PanelRows; r++ {
				packRow(sb, r, s[r*rowBytes+b*bs:r*rowBytes+(b+1)*bs])
			}
		}
	}
}

// packQ4KRow writes row r's super-block blk (file layout) into the panel super-block sb.
func packQ4KRow(sb []byte, r int, blk []byte) {
	sb, blk = sb[:q4KPanelBytes], blk[:q4_KBytes]
	copy(sb[2*r:2*r+2], blk[0:2])
	copy(sb[16+2*r:16+2*r+2], blk[2:4])
	var u [4][4]uint8 // u[q][v]: row r's bytes of U_q
	for s := 0; s < 8; s++ {
		sc, m := scaleMinK4(s, blk[4:16])
		u[s/2][2*(s%2)], u[s/2][2*(s%2)+1] = sc, m
	}
	for v := 0; v < 4; v++ {
		o := 4*r + v
		sb[32+o] = u[0][v]&15 | (u[1][v]&15)<<4
		sb[64+o] = u[2][v]&15 | (u[3][v]&15)<<4
		sb[96+o] = u[0][v]>>4 | (u[1][v]>>4)<<2 | (u[2][v]>>4)<<4 | (u[3][v]>>4)<<6
	}
	qs := blk[16:144]
	level := func(e int) uint8 { // element e's level in the file: sub-block 2g low nibbles, 2g+1 high
		q := qs[32*(e/64)+e%32]
		if e%64 >= 32 {
			return q >> 4
		}
		return q & 15
	}
	for s := 0; s < 8; s++ {
		for c := 0; c < 4; c++ {
			for i := 0; i < 4; i++ {
				sb[128+32*(4*s+c)+4*r+i] = level(32*s+4*c+i) | level(32*s+16+4*c+i)<<4
			}
		}
	}
}

// packQ6KRow writes row r's super-block blk (file layout) into the panel super-block sb.
func packQ6KRow(sb []byte, r int, blk []byte) {
	sb, blk = sb[:q6KPanelBytes], blk[:q6_KBytes]
	copy(sb[2*r:2*r+2], blk[208:210])
	for i := 0; i < 8; i++ {
		sb[16+16*i+2*r] = blk[192+2*i]
		sb[16+16*i+2*r+1] = blk[192+2*i+1]
	}
	var l [QK_K]uint8
	q6KLevels(blk, &l)
	for u := 0; u < 16; u++ {
		for i := 0; i < 4; i++ {
			o := 144 + 96*u + 4*r + i
			hi := l[16*u+12+i]
			sb[o] = l[16*u+i] | (hi&3)<<6
			sb[o+32] = l[16*u+4+i] | (hi>>2&3)<<6
			sb[o+64] = l[16*u+8+i] | (hi>>4&3)<<6
		}
	}
}

// q6KLevels decodes the 256 levels (0..63) of a file-layout Q6_K super-block.
func q6KLevels(blk []byte, l *[QK_K]uint8) {
	for h := 0; h < 2; h++ {
		ql := blk[64*h : 64*h+64]
		qh := blk[128+32*h : 128+32*h+32]
		y := l[128*h : 128*h+128]
		for i := 0; i < 32; i++ {
			y[i] = ql[i]&0xf | (qh[i]&3)<<4
			y[i+32] = ql[i+32]&0xf | (qh[i]>>2&3)<<4
			y[i+64] = ql[i]>>4 | (qh[i]>>4&3)<<4
			y[i+96] = ql[i+32]>>4 | (qh[i]>>6&3)<<4
		}
	}
}

// q4KPanelScaleMin is the scale and min of sub-block s of row r in the panel super-block sb.
func q4KPanelScaleMin(sb []byte, r, s int) (sc, m uint8) {
	q, o := s/2, 4*r+2*(s%2)
	get := func(o int) uint8 {
		lo := sb[32+o] // U_0, U_1 low bits
		if q >= 2 {
			lo = sb[64+o]
		}
		if q%2 == 1 {
			lo >>= 4
		}
		return lo&15 | (sb[96+o]>>(2*q)&3)<<4
	}
	return get(o), get(o + 1)
}

// q4KPanelLevel is the level (0..15) of element e of row r in the panel super-block sb.
func q4KPanelLevel(sb []byte, r, e int) uint8 {
	s, w := e/32, e%32
	q := sb[128+32*(4*s+w%16/4)+4*r+w%4]
	if w >= 16 {
		return q >> 4
	}
	return q & 15
}

// q6KPanelScale is the scale of group g (16 elements) of row r in the panel super-block sb.
func q6KPanelScale(sb []byte, r, g int) int8 {
	return int8(sb[16+16*(g/2)+2*r+g%2])
}

// q6KPanelLevel is the level (0..63) of element e of row r in the panel super-block sb.
func q6KPanelLevel(sb []byte, r, e int) uint8 {
	u, w := e/16, e%16
	o := 144 + 96*u + 4*r + w%4
	if w < 12 {
		return sb[o+32*(w/4)] & 63
	}
	return sb[o]>>6 | (sb[o+32]>>6)<<2 | (sb[o+64]>>6)<<4
}

// q8KBsum is bsums[g] of the Q8_K block xb.
func q8KBsum(xb []byte, g int) int32 {
	return int32(int16(binary.LittleEndian.Uint16(xb[4+QK_K+2*g:])))
}

// panelQ4KBlock adds to acc[r] row r's product of the Q4_K panel super-block sb with the Q8_K
// block xb of scale dx, as the assembly kernel computes it: the integer sums Σ_s sc_s·(levels·x)_s
// and Σ_s m_s·bsum_s, folded as acc[r] += dx·(d·isum − dmin·msum).
func panelQ4KBlock(sb, xb []byte, dx float32, acc *[PanelRows]float32) {
	sb, xb = sb[:q4KPanelBytes], xb[:q8_KBytes] // constant lengths: fewer bounds checks below
	for r := 0; r < PanelRows; r++ {
		var isum, msum int32
		for s := 0; s < 8; s++ {
			sc, m := q4KPanelScaleMin(sb, r, s)
			var dot int32
			for e := 32 * s; e < 32*s+32; e++ {
				dot += int32(q4KPanelLevel(sb, r, e)) * int32(int8(xb[4+e]))
			}
			isum += int32(sc) * dot
			msum += int32(m) * (q8KBsum(xb, 2*s) + q8KBsum(xb, 2*s+1))
		}
		d, dmin := f16At(sb[2*r:]), f16At(sb[16+2*r:])
		acc[r] += dx * (d*float32(isum) - dmin*float32(msum))
	}
}

// panelQ6KBlock adds to acc[r] row r's product of the Q6_K panel super-block sb with the Q8_K
// block xb of scale dx, as the assembly kernel computes it: the integer sum
// Σ_g sc_g·((levels·x)_g − 32·bsum_g), folded as acc[r] += isum·(d·dx).
func panelQ6KBlock(sb, xb []byte, dx float32, acc *[PanelRows]float32) {
	sb, xb = sb[:q6KPanelBytes], xb[:q8_KBytes] // constant lengths: fewer bounds checks below
	for r := 0; r < PanelRows; r++ {
		var isum int32
		for g := 0; g < 16; g++ {
			var dot int32
			for e := 16 * g; e < 16*g+16; e++ {
				dot += int32(q6KPanelLevel(sb, r, e)) * int32(int8(xb[4+e]))
			}
			isum += int32(q6KPanelScale(sb, r, g)) * (dot - 32*q8KBsum(xb, g))
		}
		acc[r] += float32(isum) * (f16At(sb[2*r:]) * dx)
	}
}
