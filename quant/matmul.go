package quant

import "fmt"

// MatMul computes out[t*outStride+r] = dot(row r of w, activation row t) for r in [r0, r1) and t in
// [0, nTok), using the DotFunc dot for weight type wt. w holds weight rows of wt.RowSize(k) bytes
// each (at least r1 of them); xq holds nTok activation rows of ActType(wt).RowSize(k) bytes each,
// as written by QuantizeAct. Tokens are taken MaxCols at a time so each weight row is decoded once
// per group.
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
	// token t0's row, whose previous contents are saved and restored around the call.
	group := min(MaxCols, r1-r0)
	for t0 := 0; t0 < nTok; t0 += group {
		nx := min(group, nTok-t0)
		xs := xq[t0*xRow : (t0+nx)*xRow]
		base := t0 * outStride
		if nx == 1 {
			for r := r0; r < r1; r++ {
				dot(k, w[r*rowBytes:(r+1)*rowBytes], xs, xRow, 1, out[base+r:base+r+1])
			}
			continue
		}
		win := out[base+r0 : base+r0+nx]
		for r := r0; r < r1; r++ {
			var saved, res [MaxCols]float32
			copy(saved[:], win)
			dot(k, w[r*rowBytes:(r+1)*rowBytes], xs, xRow, nx, win)
			copy(res[:], win)
			copy(win, saved[:nx])
			for j := 0; j < nx; j++ {
				out[(t0+j)*outStride+r] = res[j]
			}
		}
	}
}
