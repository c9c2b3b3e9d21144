package quant

import "unsafe"

// AVX2 kernels for the 32-element block formats Q4_0 and Q8_0 (both dotted with Q8_0
// activations). The assembly (dot_q8_amd64.s) follows ggml's AVX2 scheme for the products: weights
// are expanded to 32 signed bytes per block, the activation bytes take the weights' signs
// (vpsignb) so that vpmaddubsw can multiply |w| (unsigned) by ±x (signed), and vpmaddwd sums the
// 16-bit pairs into int32s. Blocks are taken four at a time: each is decoded once for all nx
// columns, and per column the four blocks' integer vectors are reduced horizontally into one
// (lane i = block i), so that one conversion and one FMA with the four blocks' scale products
// (f16 scales converted with vcvtph2ps) serve four blocks. Leftover blocks (nb%4) go through the
// same code padded with zero blocks (dotQTail).
//
// Exactness: the integer part is exact for activation quants in [-127, 127], which is all that
// QuantizeAct produces. A quant of -128 (never written by QuantizeAct) whose weight is negative
// is negated in 8 bits and stays -128, as in ggml. The float part sums in a different order than
// the Go twins, so results agree with them to float32 rounding (see kernels_amd64_test.go).

func init() {
	if hasAVX2 {
		asmKernels[Q4_0] = dotQ4_0AVX2
		asmKernels[Q8_0] = dotQ8_0AVX2
	}
}

//go:noescape
func dotQ4_0AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)

//go:noescape
func dotQ8_0AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)

// checkDotArgs panics with an index error unless w holds rowBytes bytes, each of the nx columns
// x[j*xStride:] holds xRow bytes and out holds nx floats, or if nx > MaxCols; the assembly reads
// exactly these ranges, so this is what keeps it in bounds. It reports whether there is anything
// to compute (nx >= 1; like the Go twins, nx <= 0 computes nothing).
func checkDotArgs(rowBytes, xRow int, w, x []byte, xStride, nx int, out []float32) bool {
	if nx > MaxCols {
		var cols [MaxCols]float32
		_ = cols[nx-1] // index error, like the Go twins' accumulator arrays
	}
	// Indexes, not slice expressions: slicing may run up to the capacity.
	if rowBytes > 0 {
		_ = w[rowBytes-1]
	}
	if nx < 1 {
		return false
	}
	_ = out[nx-1]
	if xRow > 0 {
		for j := 0; j < nx; j++ {
			_ = x[j*xStride]
			_ = x[j*xStride+xRow-1]
		}
	}
	return true
}

// dotQ4_0AVX2 is the DotFunc for Q4_0 weights with Q8_0 activations.
func dotQ4_0AVX2(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	nb := k / 32
	if !checkDotArgs(nb*q4_0Bytes, nb*q8_0Bytes, w, x, xStride, nx, out) {
		return
	}
	nb4 := nb &^ 3
	if nb4 > 0 {
		dotQ4_0AVX2Asm(nb4, &w[0], &x[0], xStride, nx, &out[0])
	} else {
		clear(out[:nx])
	}
	if nb4 < nb {
		dotQTail(false, nb4, nb, w, x, xStride, nx, out)
	}
}

// dotQ8_0AVX2 is the DotFunc for Q8_0 weights with Q8_0 activations.
func dotQ8_0AVX2(k int, w []byte, x []byte, xStride int, nx int, out []float32) {
	nb := k / 32
	if !checkDotArgs(nb*q8_0Bytes, nb*q8_0Bytes, w, x, xStride, nx, out) {
		return
	}
	nb4 := nb &^ 3
	if nb4 > 0 {
		dotQ8_0AVX2Asm(nb4, &w[0], &x[0], xStride, nx, &out[0])
	} else {
		clear(out[:nx])
	}
	if nb4 < nb {
		dotQTail(true, nb4, nb, w, x, xStride, nx, out)
	}
}

// dotQTail adds blocks [nb4, nb) (fewer than 4) of a Q4_0 (or, if q8, Q8_0) row to out: the
// assembly takes four blocks at a time, so they are copied to four-block buffers padded with zero
// blocks (zero scales and quants, which add nothing).
func dotQTail(q8 bool, nb4, nb int, w []byte, x []byte, xStride int, nx int, out []float32) {
	var wb [4 * q8_0Bytes]byte
	var xb [MaxCols * 4 * q8_0Bytes]byte
	var res [MaxCols]float32
	const xs = 4 * q8_0Bytes
	for j := 0; j < nx; j++ {
		copy(xb[j*xs:(j+1)*xs], x[j*xStride+nb4*q8_0Bytes:j*xStride+nb*q8_0Bytes])
	}
	if q8 {
		copy(wb[:], w[nb4*q8_0Bytes:nb*q8_0Bytes])
		dotQ8_0AVX2Asm(4, &wb[0], &xb[0], xs, nx, &res[0])
	} else {
		copy(wb[:], w[nb4*q4_0Bytes:nb*q4_0Bytes])
		dotQ4_0AVX2Asm(4, &wb[0], &xb[0], xs, nx, &res[0])
	}
	for j := 0; j < nx; j++ {
		out[j] += res[j]
	}
}

// ---- 8-row tiles: MatMul's fast path for Q4_0 and Q8_0 with several tokens ----
//
// The single-row kernels spend most of their time reducing each block's 32 products to one number
// per column (the per-block scales forbid summing across blocks first). matmulTiled instead
// repacks 8 weight rows at a time into a tile in which a register holds the same 4 elements of all
// 8 rows (q4RepackAVX2, q8RepackAVX2), so that the products of a block accumulate vertically, one
// lane per row, and a block costs one conversion and one FMA per column for 8 rows (q4TileAVX2,
// q8TileAVX2). The tile lives in a stack buffer and is applied to every token before the next 8
// rows are repacked.

const (
	tileRows = 8
	// A tile block holds 8 chunks of quants (Q4_0: raw nibbles; Q8_0: signed quants followed by
	// their absolute values), the 8 rows' f16 scales and padding to a multiple of 64 bytes.
	tileBlock4, tileScales4 = 320, 256
	tileBlock8, tileScales8 = 576, 512
	// tileMaxBytes bounds a tile; with its alignment slack the stack buffer is 128 KiB, the most
	// the compiler keeps on the stack. Q8_0 rows of up to 227 blocks (k <= 7264) and Q4_0 rows of
	// up to 409 (k <= 13088) fit. Smaller tiles (up to tileSmallBytes) use smaller buffers, which
	// cost less to zero on every call.
	tileMaxBytes   = 128<<10 - 64
	tileSmallBytes = 40<<10 - 64
	// tileSumsLen is the length of the stack buffer of Q4_0 activation sums (4 per block and
	// token group): 64 token groups at k=2048, 23 at 5632, at least 10; a quarter of that with
	// small tiles.
	tileSumsLen = 16 << 10
)

// tileMinTokens is the fewest tokens for which repacking rows of wt into tiles pays for itself
// (measured with BenchmarkMatMulSquare's shapes): Q4_0 tiles are cheap to make and their product
// is 2.5 times as fast as the single-row kernel's, while a Q8_0 repack costs about two tile
// products of 4 tokens, which are only 1.6 times as fast. With weights streamed from memory
// (a 1.1B model), the prefetching single-row kernel keeps 2 and 3 tokens faster than Q4_0 tiles:
// batched decode of tinyllama Q4_0 at B=2 went from 17-20 to 20-23 tokens/s with the threshold
// at 4 (`ubatch bench --batched -npp 16 -ntg 32 -npl 2,3`, two runs each).
func tileMinTokens(wt Type) int {
	if wt == Q8_0 {
		return 8
	}
	return 4
}

// tileBlock returns the bytes per block and the scales' offset in a tile of wt (Q4_0 or Q8_0).
func tileBlock(wt Type) (block, scales int) {
	if wt == Q8_0 {
		return tileBlock8, tileScales8
	}
	return tileBlock4, tileScales4
}

//go:noescape
func q4RepackAVX2(nb int, w *byte, rowStride int, dst *byte)

//go:noescape
func q4TileAVX2(nb int, tile, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4SumsAVX2(nb int, x *byte, xStride, nx int, dst *int32)

//go:noescape
func q8RepackAVX2(nb int, w *byte, rowStride int, dst *byte)

//go:noescape
func q8TileAVX2(nb int, tile, x *byte, xStride, nx int, out *float32, outStride int)

// asmQ4_0 and asmQ8_0 are the DotFuncs that the tiles stand in for.
var asmQ4_0, asmQ8_0 DotFunc = dotQ4_0AVX2, dotQ8_0AVX2

func init() {
	if hasAVX2 {
		tiledMatMul = matmulTiled
	}
}

// funcPC returns the code address of a func value, to recognise a particular DotFunc.
func funcPC(f DotFunc) uintptr {
	if f == nil {
		return 0
	}
	return **(**uintptr)(unsafe.Pointer(&f))
}

// tileAlign is the offset from p to the next 64-byte boundary.
func tileAlign(p *byte) uintptr { return (64 - uintptr(unsafe.Pointer(p))%64) % 64 }

// matmulTiled computes MatMul's rows [r0, r0+8n) for the largest n it can with 8-row tiles and
// returns r0+8n, the first row left to the caller. It does nothing (returns r0) unless dot is the
// assembly Q4_0 or Q8_0 kernel, there are enough tokens and the tile fits its buffer. MatMul has
// checked the shapes.
func matmulTiled(dot DotFunc, wt Type, k int, w []byte, xq []byte, nTok int, out []float32, outStride int, r0, r1 int) int {
	nb := k / 32
	bb, _ := tileBlock(wt)
	switch {
	case nTok < tileMinTokens(wt) || r1-r0 < tileRows || nb == 0 || nb*bb > tileMaxBytes:
		return r0
	case !(wt == Q4_0 && funcPC(dot) == funcPC(asmQ4_0)) && !(wt == Q8_0 && funcPC(dot) == funcPC(asmQ8_0)):
		return r0
	case nb*bb <= tileSmallBytes:
		var buf [tileSmallBytes + 64]byte
		var sums [tileSumsLen / 4]int32
		return tileRows8(wt, nb, w, xq, nTok, out, outStride, r0, r1, buf[:], sums[:])
	}
	var buf [tileMaxBytes + 64]byte
	var sums [tileSumsLen]int32
	return tileRows8(wt, nb, w, xq, nTok, out, outStride, r0, r1, buf[:], sums[:])
}

// tileRows8 is matmulTiled's loop, with buf (64 bytes more than the tile) and sums (Q4_0
// activation sums, at least 4*nb) from the caller's stack.
func tileRows8(wt Type, nb int, w, xq []byte, nTok int, out []float32, outStride, r0, r1 int, buf []byte, sums []int32) int {
	q8 := wt == Q8_0
	bb, _ := tileBlock(wt)
	rowBytes, xRow := wt.RowSize(32*nb), nb*q8_0Bytes
	// Tokens are taken in chunks whose Q4_0 activation sums fit in sums; each chunk repacks the
	// tiles again (a chunk has at least 10 token groups, so that costs little).
	chunk := len(sums) / (MaxCols * nb) * MaxCols
	r := r0
	for c0 := 0; c0 < nTok; c0 += chunk {
		cn := min(chunk, nTok-c0)
		_ = xq[(c0+cn)*xRow-1]
		if !q8 {
			for g := 0; g*MaxCols < cn; g++ {
				_ = sums[g*MaxCols*nb+4*nb-1]
				q4SumsAVX2(nb, &xq[(c0+g*MaxCols)*xRow], xRow, min(MaxCols, cn-g*MaxCols), &sums[g*MaxCols*nb])
			}
		}
		for r = r0; r+tileRows <= r1; r += tileRows {
			_ = w[(r+tileRows)*rowBytes-1]
			// The tile is 64-byte aligned so that no chunk load crosses a cache line (the offset
			// is recomputed for every call: a stack copy keeps it only modulo the stack's
			// alignment).
			tile := buf[tileAlign(&buf[0]):]
			_ = tile[nb*bb-1]
			if q8 {
				q8RepackAVX2(nb, &w[r*rowBytes], rowBytes, &tile[0])
			} else {
				q4RepackAVX2(nb, &w[r*rowBytes], rowBytes, &tile[0])
			}
			for t0 := c0; t0 < c0+cn; t0 += MaxCols {
				nx := min(MaxCols, c0+cn-t0)
				_ = out[(t0+nx-1)*outStride+r+tileRows-1]
				if q8 {
					q8TileAVX2(nb, &tile[0], &xq[t0*xRow], xRow, nx, &out[t0*outStride+r], outStride)
				} else {
					_ = sums[(t0-c0)*nb+4*nb-1]
					q4TileAVX2(nb, &tile[0], &xq[t0*xRow], xRow, nx, &out[t0*outStride+r], outStride, &sums[(t0-c0)*nb])
				}
			}
		}
	}
	return r
}

// tileRepackGo is the pure-Go twin of q4RepackAVX2 (wt Q4_0) and q8RepackAVX2 (wt Q8_0): 8 rows
// of nb blocks, rowStride bytes apart in w, into a tile of nb tile blocks.
func tileRepackGo(wt Type, nb int, w []byte, rowStride int, dst []byte) {
	bs := wt.TypeSize()
	bb, so := tileBlock(wt)
	for b := 0; b < nb; b++ {
		d := dst[b*bb : (b+1)*bb]
		for r := 0; r < tileRows; r++ {
			blk := w[r*rowStride+b*bs : r*rowStride+(b+1)*bs]
			d[so+2*r], d[so+2*r+1] = blk[0], blk[1]
			for i := 0; i < 32; i++ {
				o := 32*(i/4) + 4*r + i%4
				switch {
				case wt == Q4_0 && i < 16:
					d[o] = blk[2+i] & 0xf
				case wt == Q4_0:
					d[o] = blk[2+i-16] >> 4
				default:
					v := int8(blk[2+i])
					d[o], d[o+tileRows*32] = byte(v), byte(v)
					if v < 0 {
						d[o+tileRows*32] = byte(-v) // -128 stays 0x80, i.e. unsigned 128
					}
				}
			}
		}
	}
}

// tileProductGo is the pure-Go twin of q4TileAVX2 and q8TileAVX2: out[j*outStride+r] = row r of
// the tile · activation row j.
func tileProductGo(wt Type, nb int, tile, x []byte, xStride, nx int, out []float32, outStride int) {
	bb, so := tileBlock(wt)
	for j := 0; j < nx; j++ {
		var acc [tileRows]float32
		for b := 0; b < nb; b++ {
			d := tile[b*bb : (b+1)*bb]
			xb := x[j*xStride+b*q8_0Bytes : j*xStride+(b+1)*q8_0Bytes]
			dx := f16At(xb)
			for r := 0; r < tileRows; r++ {
				var s int32
				for i := 0; i < 32; i++ {
					q := int32(int8(d[32*(i/4)+4*r+i%4]))
					if wt == Q4_0 {
						q -= 8
					}
					s += q * int32(int8(xb[2+i]))
				}
				acc[r] += float32(s) * (f16At(d[so+2*r:]) * dx)
			}
		}
		copy(out[j*outStride:j*outStride+tileRows], acc[:])
	}
}

// q4SumsGo is the pure-Go twin of q4SumsAVX2.
func q4SumsGo(nb int, x []byte, xStride, nx int, dst []int32) {
	for b := 0; b < nb; b++ {
		for j := 0; j < nx; j++ {
			var s int32
			for _, q := range x[j*xStride+b*q8_0Bytes+2 : j*xStride+(b+1)*q8_0Bytes] {
				s += int32(int8(q))
			}
			dst[4*b+j] = 8 * s
		}
	}
}
