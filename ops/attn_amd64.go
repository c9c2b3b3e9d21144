package ops

//go:generate go run ./internal/attngen

// The attention kernels, F16 here and Q8_0 in attn_q8_amd64.go, run the AVX2/FMA/F16C assembly
// of attn_amd64.s and attn_q8_amd64.s where the selected path runs it (runsAsm, kernels.go).

// attnScoresF16AVX2 writes out[h*outStride+j] for h < heads <= 8 and j < n, n > 0 a multiple of 8,
// hd > 0 a multiple of 8; strideB is k's row stride in bytes.
//
//go:noescape
func attnScoresF16AVX2(q *float32, heads, hd int, k *uint16, cells *int32, n, strideB, outStride int, scale float32, out *float32)

// attnValuesF16AVX2 writes out[h*hd+i] for h < hb <= 4 and i < 8·cb, cb <= valsMaxCB[hb] (one
// tile, its sums in registers), summing over n > 0 cells; v and out are at the tile's first element,
// p at its first head's weights (head stride n); strideB is v's row stride in bytes. Other hb or
// cb do nothing.
//
//go:noescape
func attnValuesF16AVX2(hb, cb int, p *float32, n int, v *uint16, cells *int32, strideB int, out *float32, hd int)

// valsMaxCB is internal/attngen's: for a tile of hb heads (index), the most 8-float chunks per pass
// (the accumulators and what a cell needs besides fill the 16 ymm registers).
var valsMaxCB = [...]int{0, 8, 6, 4, 3}

// f16TileHeads is the most heads of an F16 values tile.
const f16TileHeads = len(valsMaxCB) - 1

// headGroup is the number of heads of the next values tile when heads are left and a tile holds at
// most most heads: all of them if they fit, else they are split as evenly as possible into the
// fewest tiles (each tile converts or widens the V rows again). F16 tiles hold 4 heads (3+3 for
// 6, 4+4 for 8), Q8_0 tiles 3 (2+2 for 4, 3+3+2 for 8).
func headGroup(heads, most int) int {
	if heads <= most {
		return heads
	}
	g := (heads + most - 1) / most
	return (heads + g - 1) / g
}

func attnScoresF16(q []float32, heads, hd int, k []uint16, cells []int32, stride int, scale float32, out []float32) {
	n := len(cells)
	if !runsAsm(opAttnScoresF16) || hd%8 != 0 || hd == 0 || n == 0 {
		attnScoresF16Go(q, heads, hd, k, cells, stride, scale, out)
		return
	}
	nb := n &^ 7
	for h0 := 0; h0 < heads; h0 += 8 {
		hg := min(8, heads-h0)
		if nb > 0 {
			attnScoresF16AVX2(&q[h0*hd], hg, hd, &k[0], &cells[0], nb, stride*2, n, scale, &out[h0*n])
		}
		if r := n - nb; r > 0 {
			// The last cells, padded to a block of 8 by repeating one, into a block on the stack.
			var pad [8]int32
			for i := range pad {
				pad[i] = cells[nb+min(i, r-1)]
			}
			var tmp [8 * 8]float32
			attnScoresF16AVX2(&q[h0*hd], hg, hd, &k[0], &pad[0], 8, stride*2, 8, scale, &tmp[0])
			for h := range hg {
				copy(out[(h0+h)*n+nb:(h0+h+1)*n], tmp[h*8:h*8+r])
			}
		}
	}
}

func attnValuesF16(p []float32, heads, hd int, v []uint16, cells []int32, stride int, out []float32) {
	n := len(cells)
	if !runsAsm(opAttnValuesF16) || hd%8 != 0 || n == 0 {
		attnValuesF16Go(p, heads, hd, v, cells, stride, out)
		return
	}
	for h0 := 0; h0 < heads; {
		hb := headGroup(heads-h0, f16TileHeads)
		maxCB := valsMaxCB[hb]
		for c0 := 0; c0 < hd/8; {
			cb := min(maxCB, hd/8-c0)
			attnValuesF16AVX2(hb, cb, &p[h0*n], n, &v[c0*8], &cells[0], stride*2, &out[h0*hd+c0*8], hd)
			c0 += cb
		}
		h0 += hb
	}
}
