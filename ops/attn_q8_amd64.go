package ops

// The assembly of attn_q8_amd64.s is written by internal/attngen (go generate, in attn_amd64.go).

// attnScoresQ8AVX2 writes out[h*outStride+j] for h < heads (1 to 8) and j < n (> 0); hd > 0 is a
// multiple of 32, strideB k's row stride in bytes.
//
//go:noescape
func attnScoresQ8AVX2(q *float32, heads, hd int, k *byte, cells *int32, n, strideB, outStride int, scale float32, out *float32)

// attnValuesQ8AVX2 writes out[h*hd+i] for h < hb (1 to 3) and i < 32 (one tile: heads × one
// block), summing over n > 0 cells; v is at the tile's block of row 0, p at its first head's
// weights (head stride n). Other hb do nothing.
//
//go:noescape
func attnValuesQ8AVX2(hb int, p *float32, n int, v *byte, cells *int32, strideB int, out *float32, hd int)

// attnValuesQ8PairAVX2 is attnValuesQ8AVX2 for one head and two consecutive blocks (64 values).
//
//go:noescape
func attnValuesQ8PairAVX2(p *float32, n int, v *byte, cells *int32, strideB int, out *float32)

// q8TileHeads is the most heads of a Q8_0 values tile: 12 accumulators, 3 weights and the widened
// chunk fill the 16 ymm registers.
const q8TileHeads = 3

func attnScoresQ8(q []float32, heads, hd int, k []byte, cells []int32, strideB int, scale float32, out []float32) {
	n := len(cells)
	if !runsAsm(opAttnScoresQ8) || hd == 0 || n == 0 {
		attnScoresQ8Go(q, heads, hd, k, cells, strideB, scale, out)
		return
	}
	for h0 := 0; h0 < heads; h0 += 8 {
		attnScoresQ8AVX2(&q[h0*hd], min(8, heads-h0), hd, &k[0], &cells[0], n, strideB, n, scale, &out[h0*n])
	}
}

func attnValuesQ8(p []float32, heads, hd int, v []byte, cells []int32, strideB int, out []float32) {
	n := len(cells)
	if !runsAsm(opAttnValuesQ8) || hd == 0 || n == 0 {
		attnValuesQ8Go(p, heads, hd, v, cells, strideB, out)
		return
	}
	for h0 := 0; h0 < heads; {
		hb := headGroup(heads-h0, q8TileHeads)
		b := 0
		for ; hb == 1 && b+2 <= hd/32; b += 2 {
			attnValuesQ8PairAVX2(&p[h0*n], n, &v[b*q8Block], &cells[0], strideB, &out[h0*hd+b*32])
		}
		for ; b < hd/32; b++ {
			attnValuesQ8AVX2(hb, &p[h0*n], n, &v[b*q8Block], &cells[0], strideB, &out[h0*hd+b*32], hd)
		}
		h0 += hb
	}
}
