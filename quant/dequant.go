package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Block sizes in bytes of the supported block formats (ggml's sizeof(block_*)).
const (
	q8_0Bytes = 34  // f16 d, int8 qs[32]
	q4_0Bytes = 18  // f16 d, uint8 qs[16]
	q4_KBytes = 144 // f16 d, f16 dmin, uint8 scales[12], uint8 qs[128]
	q5_KBytes = 176 // f16 d, f16 dmin, uint8 scales[12], uint8 qh[32], uint8 qs[128]
	q6_KBytes = 210 // uint8 ql[128], uint8 qh[64], int8 scales[16], f16 d
	q8_KBytes = 292 // f32 d, int8 qs[256], int16 bsums[16]
)

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }

func f16At(b []byte) float32 { return f16Table[binary.LittleEndian.Uint16(b)] }

func f32At(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

// checkLens validates a (packed bytes, element count) pair for type t.
func checkLens(t Type, nBytes, nElems int) error {
	bs := t.BlockSize()
	if bs == 0 {
		return fmt.Errorf("quant: unknown type %v", t)
	}
	if nElems%bs != 0 {
		return fmt.Errorf("quant: %d elements is not a multiple of the %v block size %d", nElems, t, bs)
	}
	if want := t.RowSize(nElems); nBytes != want {
		return fmt.Errorf("quant: %d elements of %v take %d bytes, got %d", nElems, t, want, nBytes)
	}
	return nil
}

// Dequantize converts len(dst) elements of type t, packed in src, to float32. len(dst) must be a
// multiple of t.BlockSize() and len(src) must equal t.RowSize(len(dst)). Supported types: every
// t with t.Supported() (floats, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, the K-quants Q2_K
// to Q8_K and IQ4_XS).
func Dequantize(t Type, src []byte, dst []float32) error {
	if err := checkLens(t, len(src), len(dst)); err != nil {
		return err
	}
	dequant := t.row().dequant
	if dequant == nil {
		return fmt.Errorf("quant: dequantizing %v is not supported", t)
	}
	dequant(src, dst)
	return nil
}

func dequantF32(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = f32At(src[4*i:])
	}
}

func dequantF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = f16At(src[2*i:])
	}
}

func dequantBF16(src []byte, dst []float32) {
	for i := range dst {
		dst[i] = BF16ToF32(le16(src[2*i:]))
	}
}

// dequantQ8_0 expands len(dst)/32 Q8_0 blocks: value = d * qs[i].
func dequantQ8_0(src []byte, dst []float32) {
	eachDequant(src, dst, 32, q8_0Bytes, func(blk []byte, y []float32) {
		d := f16At(blk)
		qs := blk[2:34]
		for i := range y {
			y[i] = float32(int8(qs[i])) * d
		}
	})
}

// dequantQ4_0 expands Q4_0 blocks: element j is the low nibble of qs[j], element j+16 the high
// nibble, value = (q - 8) * d.
func dequantQ4_0(src []byte, dst []float32) {
	eachDequant(src, dst, 32, q4_0Bytes, func(blk []byte, y []float32) {
		d := f16At(blk)
		qs := blk[2:18]
		for j := 0; j < 16; j++ {
			y[j] = float32(int(qs[j]&0xf)-8) * d
			y[j+16] = float32(int(qs[j]>>4)-8) * d
		}
	})
}

// scaleMinK4 unpacks the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of a
// Q4_K/Q5_K super-block: sub-blocks 0-3 use the low 6 bits of bytes j and j+4; sub-blocks 4-7 keep
// their low 4 bits in byte j+4 and their top 2 bits in the spare high bits of bytes j-4 and j.
func scaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xf | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

// dequantQ4_K expands Q4_K super-blocks. Each group of 64 elements uses 32 bytes of qs: the low
// nibbles are sub-block 2g, the high nibbles sub-block 2g+1; value = d*sc*q - dmin*m.
func dequantQ4_K(src []byte, dst []float32) { dequantKScaleMin(false, src, dst) }

// dequantQ5_K expands Q5_K super-blocks: as Q4_K with a fifth bit per element taken from qh; for
// group g, bit 2g of qh[l] belongs to element 64g+l and bit 2g+1 to element 64g+32+l.
func dequantQ5_K(src []byte, dst []float32) { dequantKScaleMin(true, src, dst) }

// dequantKScaleMin is dequantQ4_K, or with q5 dequantQ5_K: element e of sub-block s = e/32 is
// d*sc_s*level_e - dmin*m_s, with the levels as the dot products decode them.
func dequantKScaleMin(q5 bool, src []byte, dst []float32) {
	blockBytes := q4_KBytes
	if q5 {
		blockBytes = q5_KBytes
	}
	var l [QK_K]byte
	eachDequant(src, dst, QK_K, blockBytes, func(blk []byte, y []float32) {
		d, dmin := f16At(blk), f16At(blk[2:])
		if q5 {
			levelsQ5_K(&l, blk)
		} else {
			levelsQ4_K(&l, blk)
		}
		for s := 0; s < 8; s++ {
			sc, m := scaleMinK4(s, blk[4:16])
			ds, ms := d*float32(sc), dmin*float32(m)
			for i := 32 * s; i < 32*s+32; i++ {
				y[i] = ds*float32(l[i]) - ms
			}
		}
	})
}

// dequantQ6_K expands Q6_K super-blocks. Each half (128 elements) uses 64 bytes of ql, 32 of qh and
// 8 scales; for l < 32 the four elements l, l+32, l+64, l+96 take the low nibbles of ql[l] and
// ql[l+32], then their high nibbles, with bit pairs 0-1, 2-3, 4-5, 6-7 of qh[l] on top;
// value = d * scale[16-element group] * (q - 32).
func dequantQ6_K(src []byte, dst []float32) {
	eachDequant(src, dst, QK_K, q6_KBytes, func(blk []byte, out []float32) {
		d := f16At(blk[208:])
		for h := 0; h < 2; h++ {
			ql := blk[64*h : 64*h+64]
			qh := blk[128+32*h : 128+32*h+32]
			sc := blk[192+8*h : 192+8*h+8]
			y := out[128*h : 128*h+128]
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int(ql[l]&0xf|(qh[l]&3)<<4) - 32
				q2 := int(ql[l+32]&0xf|((qh[l]>>2)&3)<<4) - 32
				q3 := int(ql[l]>>4|((qh[l]>>4)&3)<<4) - 32
				q4 := int(ql[l+32]>>4|((qh[l]>>6)&3)<<4) - 32
				y[l] = d * float32(int8(sc[is])) * float32(q1)
				y[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
				y[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
				y[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
			}
		}
	})
}

// dequantQ8_K expands Q8_K super-blocks: value = d * qs[i] (bsums are redundant and ignored).
func dequantQ8_K(src []byte, dst []float32) {
	eachDequant(src, dst, QK_K, q8_KBytes, func(blk []byte, y []float32) {
		d := f32At(blk)
		qs := blk[4 : 4+QK_K]
		for i := range y {
			y[i] = d * float32(int8(qs[i]))
		}
	})
}

// eachDequant calls f for every block being expanded: blk its size bytes of src, y its elems
// values of dst (len(dst) a multiple of elems).
func eachDequant(src []byte, dst []float32, elems, size int, f func(blk []byte, y []float32)) {
	for b := range len(dst) / elems {
		f(src[b*size:(b+1)*size], dst[b*elems:(b+1)*elems])
	}
}
