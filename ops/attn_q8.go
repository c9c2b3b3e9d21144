package ops

import (
	"fmt"

	"ubatch/quant"
)

// Attention kernels over a Q8_0 KV cache (kvformat's Q8_0 rows): each cell's row is a run of ggml Q8_0
// blocks of 32 values, 34 bytes each (the half-precision scale d, then 32 int8 q; value d·q).
// The kernels read the blocks directly: a key or value is never dequantized into memory.

// q8Block is the byte size of one Q8_0 block of 32 values.
const q8Block = 34

// AttnScoresQ8 computes, for h < heads and j < len(cells),
//
//	out[h*len(cells)+j] = scale · Σ_{i<hd} q[h*hd+i] · K(cells[j], i)
//
// where K(c, i) is element i of the Q8_0 row that starts at byte c*strideB of k: the int8 at byte
// i/32*34+2+i%32 times the half at byte i/32*34. k is a Q8_0 KV-cache layer already offset to the
// KV head's first block; hd is a multiple of 32 (as llama.cpp requires of a quantized cache: a
// block never mixes heads). q holds heads×hd floats. It panics if hd is not a multiple of 32, a
// cell is negative or its blocks end past len(k), or q or out is shorter than heads×hd or
// heads×len(cells).
func AttnScoresQ8(q []float32, heads, hd int, k []byte, cells []int32, strideB int, scale float32, out []float32) {
	checkAttnQ8("AttnScoresQ8", heads, hd, len(k), cells, strideB, len(q), len(out))
	attnScoresQ8(q, heads, hd, k, cells, strideB, scale, out)
}

// AttnValuesQ8 computes, for h < heads and i < hd,
//
//	out[h*hd+i] = Σ_j p[h*len(cells)+j] · V(cells[j], i)
//
// overwriting out (heads×hd floats), with V read from v as AttnScoresQ8 reads K; p holds the
// heads' softmax weights, laid out as AttnScoresQ8's out. It panics as AttnScoresQ8 does.
func AttnValuesQ8(p []float32, heads, hd int, v []byte, cells []int32, strideB int, out []float32) {
	checkAttnQ8("AttnValuesQ8", heads, hd, len(v), cells, strideB, len(out), len(p))
	attnValuesQ8(p, heads, hd, v, cells, strideB, out)
}

// checkAttnQ8 is checkAttn for Q8_0 rows: a head of hd values spans hd/32 blocks.
func checkAttnQ8(fn string, heads, hd, kvLen int, cells []int32, strideB, lenHD, lenN int) {
	checkVecs(fn, heads, hd, len(cells), lenHD, lenN)
	if hd%32 != 0 {
		panic(fmt.Sprintf("ops.%s: hd %d is not a multiple of the Q8_0 block of 32", fn, hd))
	}
	checkCells(fn, hd/32*q8Block, kvLen, cells, strideB)
}

// q8Scale is the scale of the Q8_0 block blk.
func q8Scale(blk []byte) float32 { return quant.F16ToF32(uint16(blk[0]) | uint16(blk[1])<<8) }

// attnScoresQ8Go is AttnScoresQ8 without the checks, in Go: per block, the sum of q·int8 times
// the block's scale.
func attnScoresQ8Go(q []float32, heads, hd int, k []byte, cells []int32, strideB int, scale float32, out []float32) {
	n := len(cells)
	for j, c := range cells {
		row := k[int(c)*strideB:][:hd/32*q8Block]
		for h := range heads {
			var s float32
			for b := range hd / 32 {
				blk := row[b*q8Block:][:q8Block]
				qb := q[h*hd+b*32:][:32]
				var bs float32
				for i, x := range blk[2:] {
					bs += qb[i] * float32(int8(x))
				}
				s += q8Scale(blk) * bs
			}
			out[h*n+j] = scale * s
		}
	}
}

// attnValuesQ8Go is AttnValuesQ8 without the checks, in Go: per cell and block, each head's
// weight times the block's scale, times the int8 values.
func attnValuesQ8Go(p []float32, heads, hd int, v []byte, cells []int32, strideB int, out []float32) {
	n := len(cells)
	out = out[:heads*hd]
	clear(out)
	for j, c := range cells {
		row := v[int(c)*strideB:][:hd/32*q8Block]
		for b := range hd / 32 {
			blk := row[b*q8Block:][:q8Block]
			d := q8Scale(blk)
			for h := range heads {
				w := p[h*n+j] * d
				o := out[h*hd+b*32:][:32]
				for i, x := range blk[2:] {
					o[i] += w * float32(int8(x))
				}
			}
		}
	}
}
