package quant

import "fmt"

// matmulBlockBytes is how many weight bytes MatMul applies to every token before moving on to the
// next rows: small enough to stay in a core's L2 cache (with the activations of a token group in
// L1), large enough that the per-block overhead is nothing.
const matmulBlockBytes = 96 << 10

// MatMul computes out[t*outStride+r] = dot(row r of w, activation row t) for r in [r0, r1) and t in
// [0, nTok), using the DotFunc dot for weight type wt. w holds weight rows of wt.RowSize(k) bytes
// each (at least r1 of them); xq holds nTok activation rows of ActType(wt).RowSize(k) bytes each,
// as written by QuantizeAct. Tokens are taken MaxCols at a time so each weight row is decoded once
// per group, and the rows are taken in blocks of about matmulBlockBytes that are applied to every
// token group before the next block is touched, so each weight byte is read from memory once per
// call however many tokens there are (later groups find the block in cache). Q4_0, Q8_0,
// Q4_K and Q6_K weights packed by PackRows go through MatMulPacked instead.
//
// Only out[t*outStride+r] for r in [r0, r1) is written (and, transiently, read), so goroutines may
// run MatMul on disjoint row ranges of the same out concurrently; outStride must be >= r1 when
// nTok > 1. MatMul does not allocate. Inputs that are too short for the shape are programming
// errors and panic with a descriptive message.
func MatMul(dot DotFunc, wt Type, k int, w []byte, xq []byte, nTok int, out []float32, outStride int, r0, r1 int) {
	if r1 <= r0 || nTok <= 0 {
		return
	}
	rowBytes := wt.RowSize(k)
	xRow := ActType(wt).RowSize(k)
	switch {
	case dot == nil || rowBytes == 0 || k%wt.BlockSize() != 0:
		panic(fmt.Sprintf("quant.MatMul: no kernel or bad shape for %d elements of %v", k, wt))
	case r0 < 0 || len(w) < r1*rowBytes:
		panic(fmt.Sprintf("quant.MatMul: rows [%d, %d) of %d bytes do not fit in %d weight bytes", r0, r1, rowBytes, len(w)))
	case len(xq) < nTok*xRow:
		panic(fmt.Sprintf("quant.MatMul: %d activation rows of %d bytes do not fit in %d bytes", nTok, xRow, len(xq)))
	case (nTok > 1 && outStride < r1) || len(out) < (nTok-1)*outStride+r1:
		panic(fmt.Sprintf("quant.MatMul: out of %d floats with stride %d cannot hold %d tokens x %d rows", len(out), outStride, nTok, r1))
	}

	// A DotFunc writes its nx results contiguously, but our outputs for one weight row are
	// outStride apart. A local scratch array passed to the (indirect) dot call would escape to the
	// heap, so instead the kernel writes into a window of out that this call owns, [r0, r0+nx) of
	// the group's first token row, whose previous contents are saved and restored around the call.
	// The window needs nx <= r1-r0, hence the group size.
	group := min(MaxCols, r1-r0)
	blockRows := r1 - r0
	if nTok > group {
		blockRows = max(1, matmulBlockBytes/rowBytes)
	}
	for rb := r0; rb < r1; rb += blockRows {
		re := min(r1, rb+blockRows)
		wb := w[rb*rowBytes : re*rowBytes]
		for t0 := 0; t0 < nTok; t0 += group {
			nx := min(group, nTok-t0)
			xs := xq[t0*xRow : (t0+nx)*xRow]
			base := t0 * outStride
			if nx == 1 {
				o := out[base+rb : base+re]
				for i := range o {
					dot(k, wb[i*rowBytes:(i+1)*rowBytes], xs, xRow, 1, o[i:i+1])
				}
				continue
			}
			win := out[base+r0 : base+r0+nx]
			for i := 0; i < re-rb; i++ {
				var saved, res [MaxCols]float32
				copy(saved[:], win)
				dot(k, wb[i*rowBytes:(i+1)*rowBytes], xs, xRow, nx, win)
				copy(res[:], win)
				copy(win, saved[:nx])
				for j := 0; j < nx; j++ {
					out[(t0+j)*outStride+rb+i] = res[j]
				}
			}
		}
	}
}
