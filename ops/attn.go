package ops

import (
	"fmt"

	"ubatch/quant"
)

// Attention kernels over a list of KV cells. For one token and one KV head they compute the scores
// of the query heads that share the KV head against every visible cell, and the weighted sum of
// the cells' values, in one call each: a row of the cache is read (and, for an F16 cache,
// converted) once for all the heads, and on amd64 the sums stay in registers across cells
// (attn_amd64.s). The pure-Go functions below are the fallback and the reference the assembly is
// tested against.

// AttnScoresF16 computes, for h < heads and j < len(cells),
//
//	out[h*len(cells)+j] = scale · Σ_{i<hd} q[h*hd+i] · half(k[int(cells[j])*stride+i])
//
// q holds heads×hd floats (the query heads that share one KV head), k is an F16 KV-cache layer
// already offset to the KV head (so row c starts at c*stride), stride >= hd. It panics if a cell
// is negative or its row ends past len(k), or if q or out is shorter than heads×hd or
// heads×len(cells).
func AttnScoresF16(q []float32, heads, hd int, k []uint16, cells []int32, stride int, scale float32, out []float32) {
	checkAttn("AttnScoresF16", heads, hd, len(k), cells, stride, len(q), len(out))
	attnScoresF16(q, heads, hd, k, cells, stride, scale, out)
}

// AttnValuesF16 computes, for h < heads and i < hd,
//
//	out[h*hd+i] = Σ_j p[h*len(cells)+j] · half(v[int(cells[j])*stride+i])
//
// overwriting out (heads×hd floats); p holds the heads' softmax weights, laid out as
// AttnScoresF16's out. It panics if a cell is negative or its row ends past len(v), or if p or out
// is shorter than heads×len(cells) or heads×hd.
func AttnValuesF16(p []float32, heads, hd int, v []uint16, cells []int32, stride int, out []float32) {
	checkAttn("AttnValuesF16", heads, hd, len(v), cells, stride, len(out), len(p))
	attnValuesF16(p, heads, hd, v, cells, stride, out)
}

// AttnScoresF32 is AttnScoresF16 over a float32 cache.
func AttnScoresF32(q []float32, heads, hd int, k []float32, cells []int32, stride int, scale float32, out []float32) {
	checkAttn("AttnScoresF32", heads, hd, len(k), cells, stride, len(q), len(out))
	n := len(cells)
	for j, c := range cells {
		row := k[int(c)*stride:][:hd]
		for h := range heads {
			out[h*n+j] = scale * DotF32(q[h*hd:(h+1)*hd], row)
		}
	}
}

// AttnValuesF32 is AttnValuesF16 over a float32 cache.
func AttnValuesF32(p []float32, heads, hd int, v []float32, cells []int32, stride int, out []float32) {
	checkAttn("AttnValuesF32", heads, hd, len(v), cells, stride, len(out), len(p))
	n := len(cells)
	clear(out[:heads*hd])
	for h := range heads {
		o := out[h*hd : (h+1)*hd]
		for j, c := range cells {
			AxpyF32(p[h*n+j], v[int(c)*stride:][:hd], o)
		}
	}
}

// checkAttn panics unless heads and hd are not negative, stride >= hd, every cell's row (stride
// apart, hd long) lies within a cache of kvLen elements, and the vectors indexed by head and
// dimension, and by head and cell, hold at least heads×hd and heads×len(cells) floats (lenHD and
// lenN). It divides rather than multiplies, so that no product can overflow.
func checkAttn(fn string, heads, hd, kvLen int, cells []int32, stride, lenHD, lenN int) {
	checkVecs(fn, heads, hd, len(cells), lenHD, lenN)
	checkCells(fn, hd, kvLen, cells, stride)
}

// checkVecs is checkAttn's check of the vectors.
func checkVecs(fn string, heads, hd, n, lenHD, lenN int) {
	if heads < 0 || hd < 0 {
		panic(fmt.Sprintf("ops.%s: heads %d, hd %d", fn, heads, hd))
	}
	if hd > 0 && heads > lenHD/hd || n > 0 && heads > lenN/n {
		panic(fmt.Sprintf("ops.%s: vectors of %d and %d floats, need heads·hd and heads·cells (heads %d, hd %d, %d cells)",
			fn, lenHD, lenN, heads, hd, n))
	}
}

// checkCells is checkAttn's check of the cells: rows of span elements, stride apart, in a cache of
// kvLen elements.
func checkCells(fn string, span, kvLen int, cells []int32, stride int) {
	if stride < span {
		panic(fmt.Sprintf("ops.%s: stride %d < row span %d", fn, stride, span))
	}
	if len(cells) == 0 {
		return
	}
	lo, hi := cells[0], cells[0]
	for _, c := range cells[1:] {
		lo = min(lo, c)
		hi = max(hi, c)
	}
	// Row hi ends at hi*stride+span <= kvLen.
	if lo < 0 || kvLen < span || stride > 0 && int(hi) > (kvLen-span)/stride {
		panic(fmt.Sprintf("ops.%s: cells %d..%d with stride %d, row span %d outside a cache of %d elements",
			fn, lo, hi, stride, span, kvLen))
	}
}

// attnScoresF16Go is AttnScoresF16 without the checks, in Go.
func attnScoresF16Go(q []float32, heads, hd int, k []uint16, cells []int32, stride int, scale float32, out []float32) {
	n := len(cells)
	for j, c := range cells {
		row := k[int(c)*stride:][:hd]
		for h := range heads {
			out[h*n+j] = scale * dotF16Go(q[h*hd:(h+1)*hd], row)
		}
	}
}

// attnValuesF16Go is AttnValuesF16 without the checks, in Go.
func attnValuesF16Go(p []float32, heads, hd int, v []uint16, cells []int32, stride int, out []float32) {
	n := len(cells)
	out = out[:heads*hd]
	clear(out)
	for j, c := range cells {
		row := v[int(c)*stride:][:hd]
		for i, x := range row {
			f := quant.F16ToF32(x)
			for h := range heads {
				out[h*hd+i] += p[h*n+j] * f
			}
		}
	}
}
