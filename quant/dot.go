package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// MaxCols is the largest number of activation rows (columns of the product) a DotFunc handles in
// one call.
const MaxCols = 4

// DotFunc computes out[j] = Σ_i W[i]·X_j[i] for j in [0, nx): W is one weight row of k elements of
// the weight type (k a multiple of its block size) packed in w, and X_j is activation row j, k
// elements of the matching ActType packed in x[j*xStride:] (xStride in bytes). 1 <= nx <= MaxCols
// and len(out) >= nx. The weight blocks are decoded once for all nx columns. Inputs shorter than
// the shape requires make it panic with an index error; it never allocates.
type DotFunc func(k int, w []byte, x []byte, xStride int, nx int, out []float32)

// QuantizeAct converts one activation row x (len k, a multiple of ActType(w).BlockSize()) into
// dst, which must hold at least ActType(w).RowSize(k) bytes. For an F32 ActType the bytes are the
// float32s little-endian. It does not allocate; a k that is not a multiple of the block size or a
// short dst is a programming error and panics with a descriptive message.
func QuantizeAct(w Type, x []float32, dst []byte) {
	at := ActType(w)
	k := len(x)
	if bs := at.BlockSize(); k%bs != 0 {
		panic(fmt.Sprintf("quant.QuantizeAct: %d activations is not a multiple of the %v block size %d", k, at, bs))
	}
	n := at.RowSize(k)
	if len(dst) < n {
		panic(fmt.Sprintf("quant.QuantizeAct: dst holds %d bytes, %d %v activations need %d", len(dst), k, at, n))
	}
	types[at].quantize(x, dst[:n])
}

// Dot returns the dot product of one weight row w (k elements of type t) with one activation row x
// (k elements of ActType(t), as written by QuantizeAct), using the pure-Go kernels. It panics if t
// has no dot product or the inputs are too short.
func Dot(t Type, k int, w []byte, x []byte) float32 {
	dot := DotGo(t)
	if dot == nil {
		panic(fmt.Sprintf("quant.Dot: no dot product for %v", t))
	}
	var out [1]float32
	dot(k, w, x, 0, 1, noescape(out[:])) // out stays on the stack
	return out[0]
}

// dot16 is the integer dot product of 16 int8 weights with 16 int8 activations, both stored as
// bytes (two's complement). Fully unrolled over fixed-size arrays: constant offsets and no bounds
// checks made it measurably faster than the loop form.
func dot16(w, x *[16]byte) int32 {
	return int32(int8(w[0]))*int32(int8(x[0])) + int32(int8(w[1]))*int32(int8(x[1])) +
		int32(int8(w[2]))*int32(int8(x[2])) + int32(int8(w[3]))*int32(int8(x[3])) +
		int32(int8(w[4]))*int32(int8(x[4])) + int32(int8(w[5]))*int32(int8(x[5])) +
		int32(int8(w[6]))*int32(int8(x[6])) + int32(int8(w[7]))*int32(int8(x[7])) +
		int32(int8(w[8]))*int32(int8(x[8])) + int32(int8(w[9]))*int32(int8(x[9])) +
		int32(int8(w[10]))*int32(int8(x[10])) + int32(int8(w[11]))*int32(int8(x[11])) +
		int32(int8(w[12]))*int32(int8(x[12])) + int32(int8(w[13]))*int32(int8(x[13])) +
		int32(int8(w[14]))*int32(int8(x[14])) + int32(int8(w[15]))*int32(int8(x[15]))
}

// dot32 is dot16 over 32 elements.
func dot32(w, x *[32]byte) int32 {
	return dot16((*[16]byte)(w[:16]), (*[16]byte)(x[:16])) + dot16((*[16]byte)(w[16:]), (*[16]byte)(x[16:]))
}

// dotF32Chunk is Σ w[i]·x_i with x_i the float32 little-endian at x[4i:]; four partial sums keep
// the float adds from serialising on one register.
func dotF32Chunk(w []float32, x []byte) float32 {
	x = x[:4*len(w)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(w); i += 4 {
		wv := (*[4]float32)(w[i : i+4])
		xb := (*[16]byte)(x[4*i : 4*i+16])
		s0 += wv[0] * f32At(xb[0:4])
		s1 += wv[1] * f32At(xb[4:8])
		s2 += wv[2] * f32At(xb[8:12])
		s3 += wv[3] * f32At(xb[12:16])
	}
	for ; i < len(w); i++ {
		s0 += w[i] * f32At(x[4*i:])
	}
	return (s0 + s1) + (s2 + s3)
}

// dotF32Bytes is Σ w_i·x_i over two rows of little-endian float32s of equal length (a multiple
// of 4 bytes); F32 weights need no decoding, so each column reads them straight from w.
func dotF32Bytes(w, x []byte) float32 {
	x = x[:len(w)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+16 <= len(w); i += 16 {
		wb := (*[16]byte)(w[i : i+16])
		xb := (*[16]byte)(x[i : i+16])
		s0 += f32At(wb[0:4]) * f32At(xb[0:4])
		s1 += f32At(wb[4:8]) * f32At(xb[4:8])
		s2 += f32At(wb[8:12]) * f32At(xb[8:12])
		s3 += f32At(wb[12:16]) * f32At(xb[12:16])
	}
	for ; i+4 <= len(w); i += 4 {
		s0 += f32At(w[i:]) * f32At(x[i:])
	}
	return (s0 + s1) + (s2 + s3)
}

// floatChunk is how many weights the F16/BF16 kernels decode at a time.
const floatChunk = 64

// dotFloatGo is the shared body of the F16/BF16 kernels (wt is one of those): each chunk of
// weights is expanded to float32 once and dotted with every column. The decoder is chosen by a
// branch rather than passed as a func value so the chunk buffer stays on the stack.
func dotFloatGo(wt Type, k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	var acc [MaxCols]float32
	var wf [floatChunk]float32
	for i0 := 0; i0 < k; i0 += floatChunk {
		n := min(floatChunk, k-i0)
		decodeHalves(wt == BF16, wf[:n], w[2*i0:2*(i0+n)])
		for j := 0; j < nx; j++ {
			off := j*xStride + 4*i0
			acc[j] += dotF32Chunk(wf[:n], x[off:off+4*n])
		}
	}
	copy(out[:nx], acc[:nx])
}

// decodeHalves expands len(dst) F16 (or, if bf16, BF16) values from src. It is kept out of line:
// inlined into dotFloatGo's loop nest it made the compiler spill the loop counters.
//
//go:noinline
func decodeHalves(bf16 bool, dst []float32, src []byte) {
	src = src[:2*len(dst)]
	if bf16 {
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		}
		return
	}
	for i := range dst {
		dst[i] = f16Table[binary.LittleEndian.Uint16(src[2*i:])]
	}
}

// dotF32Go is the DotFunc for F32 weights with F32 activations.
func dotF32Go(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	w = w[:4*k]
	for j := 0; j < nx; j++ {
		out[j] = dotF32Bytes(w, x[j*xStride:j*xStride+4*k])
	}
}

// dotF16Go is the DotFunc for F16 weights with F32 activations.
func dotF16Go(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dotFloatGo(F16, k, w, x, xStride, nx, out)
}

// dotBF16Go is the DotFunc for BF16 weights with F32 activations.
func dotBF16Go(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	dotFloatGo(BF16, k, w, x, xStride, nx, out)
}

// dotQ8_0Go is the DotFunc for Q8_0 weights with Q8_0 activations: per 32-element block the
// integer dot of the quants times d_w*d_x, summed in float32.
func dotQ8_0Go(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	var acc [MaxCols]float32
	for b := 0; b < k/32; b++ {
		blk := w[b*q8_0Bytes : (b+1)*q8_0Bytes]
		dw := f16At(blk)
		wq := (*[32]byte)(blk[2:34])
		for j := 0; j < nx; j++ {
			off := j*xStride + b*q8_0Bytes
			xb := x[off : off+q8_0Bytes]
			acc[j] += float32(dot32(wq, (*[32]byte)(xb[2:34]))) * (dw * f16At(xb))
		}
	}
	copy(out[:nx], acc[:nx])
}

// dotQ4_0Go is the DotFunc for Q4_0 weights with Q8_0 activations: the nibbles are decoded to
// q-8 in [-8, 7] once per block, then dotted with each column like Q8_0.
func dotQ4_0Go(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	var acc [MaxCols]float32
	var wq [32]byte // levels q-8 as int8 bit patterns
	for b := 0; b < k/32; b++ {
		blk := w[b*q4_0Bytes : (b+1)*q4_0Bytes]
		dw := f16At(blk)
		qs := (*[16]byte)(blk[2:18])
		for i, q := range qs {
			wq[i] = q&0xf - 8
			wq[i+16] = q>>4 - 8
		}
		for j := 0; j < nx; j++ {
			off := j*xStride + b*q8_0Bytes
			xb := x[off : off+q8_0Bytes]
			acc[j] += float32(dot32(&wq, (*[32]byte)(xb[2:34]))) * (dw * f16At(xb))
		}
	}
	copy(out[:nx], acc[:nx])
}
