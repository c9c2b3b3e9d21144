package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"ubatch/internal/cpu"
)

// Packed weights: Q4_0 and Q8_0 (and, see packed_k.go, Q4_K and Q6_K) matrices rearranged once, at
// load time, into panels of 8 rows so that a kernel holds the same few elements of all 8 rows in
// one register. The products of a block then accumulate vertically, one 32-bit lane per row, and a
// block costs one conversion and one FMA per token for 8 rows instead of a horizontal reduction
// per row (what the single-row kernels spend most of their time on). Packing keeps every byte: a
// packed matrix is exactly as large as the file's, and panel p occupies the bytes of rows
// [8p, 8p+8), so row ranges that are multiples of 8 keep their offsets.
//
// Panel layout, for nb blocks of 32 elements per row: block b of the 8 rows occupies the 8·34
// (Q8_0) or 8·18 (Q4_0) bytes at b times that size, so that a kernel streams one pointer, in
// order, as the K-quant panels do (packed_k.go). (The scales of all blocks once followed the
// quants: a second stream, whose lines no prefetch covered in time, so that 1-token matmuls
// streaming from memory ran at half the speed.)
//
//	[0, 16)       the 8 rows' f16 scales of block b, row r at 2r
//	[16, 16+QB)   QB bytes of quants; chunk c (32 bytes at 16+32c) holds in dword lane r four bytes
//	              of row r's block b. Q8_0 (QB=256): chunk c in 0..7 holds quants 4c..4c+3. Q4_0
//	              (QB=128): chunk c in 0..3 holds the file's quant bytes 4c..4c+3, whose low
//	              nibbles are elements 4c..4c+3 and high nibbles elements 16+4c..16+4c+3.

// PanelRows is the number of rows in a panel of packed weights.
const PanelRows = 8

// The panel kernels compute out[j*outStride+r] = row r of the panel at w (nb blocks, or for Q4_K
// and Q6_K nb super-blocks) · activation row j (ActType(wt) blocks at x[j*xStride:]) for r < 8 and
// j < nx (1 <= nx <= MaxCols), and write nothing else. Where needsSums(wt), sums must hold the
// activation sums of the nb blocks of the nx activation rows (panelSums); the other types take
// no sums.
// panelKernel runs np consecutive panels: panel p's weights follow panel p-1's in w, its outputs
// are out[j*outStride+8p+r]. It runs the kernel of the selected path in wt's row of types (the
// assembly, or the Go twin one panel at a time). The assembly kernels loop over the panels
// themselves: in a 1-token matmul a panel is a fraction of a microsecond of work, and a call per
// panel through the dispatch cost 10% of the kernels' speed.
func panelKernel(wt Type, np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, sums []int32) {
	selectedPanel(wt).run(np, nb, w, x, xStride, nx, out, outStride, sums)
}

// panelGo is panelKernel with the Go twins, whatever the selected path.
func panelGo(wt Type, np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int) {
	types[wt].kernels.panelAt[cpu.Go].run(np, nb, w, x, xStride, nx, out, outStride, nil)
}

// q4SumsKernel is q4SumsGo, in assembly where the selected path has it.
func q4SumsKernel(nb int, x []byte, xStride, nx int, mul int32, dst []int32) {
	if q4SumsPaths[cpu.Selected()] != cpu.Go {
		q4Sums(nb, x, xStride, nx, mul, dst)
		return
	}
	q4SumsGo(nb, x, xStride, nx, mul, dst)
}

// CanPack reports whether weights of type wt with rows rows of k elements can be packed and
// multiplied by MatMulPacked with a fast kernel on the selected path. Without one (the Go
// path, or another architecture), weights are better left as they are for the single-row
// kernels.
func CanPack(wt Type, k, rows int) bool {
	return packable(wt, k) && wt.row().kernels.panelPath[cpu.Selected()] != cpu.Go && rows > 0 && rows%PanelRows == 0
}

// packable reports whether rows of k elements of wt have a panel layout and kernels (Q4_0 and
// Q8_0 in whole blocks, Q4_K and Q6_K in whole super-blocks), at most maxPackedK elements.
func packable(wt Type, k int) bool {
	r := wt.row()
	return r.pack != nil && k > 0 && k%r.blockSize == 0 && k <= maxPackedK
}

// PackRows rearranges rows of Q4_0, Q8_0, Q4_K or Q6_K weights (k elements each, the row count a
// multiple of 8) from the file layout in src into panels in dst; len(dst) must equal len(src).
func PackRows(wt Type, k int, dst, src []byte) error {
	r := wt.row()
	if r.pack == nil {
		return fmt.Errorf("quant.PackRows: %v weights cannot be packed", wt)
	}
	rowBytes := wt.RowSize(k)
	panel := PanelRows * rowBytes
	switch {
	case k <= 0 || k%r.blockSize != 0:
		return fmt.Errorf("quant.PackRows: rows of %d elements are not whole %v blocks", k, wt)
	case len(src)%panel != 0 || len(dst) != len(src):
		return fmt.Errorf("quant.PackRows: %d bytes are not a whole number of 8-row panels of %d bytes (dst %d)", len(src), panel, len(dst))
	}
	return r.pack(wt, k, dst, src)
}

// q32ScaleBytes is the size of the scale that starts each block of a 32-element type with a
// panel layout: an f16 (Q4_0, Q8_0) or MXFP4's E8M0 byte. A panel block starts with its 8 rows'
// scales, so its quants are at PanelRows times this.
func q32ScaleBytes(wt Type) int {
	if wt == MXFP4 {
		return 1
	}
	return 2
}

// packQ32Rows is PackRows for Q4_0, Q8_0 and MXFP4, whose shapes PackRows has checked.
func packQ32Rows(wt Type, k int, dst, src []byte) error {
	rowBytes := wt.RowSize(k)
	panel := PanelRows * rowBytes
	nb, bs, sb := k/32, wt.TypeSize(), q32ScaleBytes(wt)
	qb := bs - sb // quant bytes per block and row: 16 or 32
	for p := 0; p < len(src); p += panel {
		s, d := src[p:p+panel], dst[p:p+panel]
		for b := 0; b < nb; b++ {
			pb := d[b*PanelRows*bs : (b+1)*PanelRows*bs]
			q := pb[PanelRows*sb:]
			for r := 0; r < PanelRows; r++ {
				blk := s[r*rowBytes+b*bs : r*rowBytes+(b+1)*bs]
				copy(pb[sb*r:sb*r+sb], blk[:sb])
				for c := 0; c < qb/4; c++ {
					binary.LittleEndian.PutUint32(q[32*c+4*r:], binary.LittleEndian.Uint32(blk[sb+4*c:]))
				}
			}
		}
	}
	return nil
}

// panelQ8_0Go, panelQ4_0Go, panelQ4KGo and panelQ6KGo are the Go twins of the panel kernels.
func panelQ8_0Go(nb int, w, x []byte, xStride, nx int, out []float32, outStride int) {
	panelProductGo(Q8_0, nb, w, x, xStride, nx, out, outStride)
}

func panelQ4_0Go(nb int, w, x []byte, xStride, nx int, out []float32, outStride int) {
	panelProductGo(Q4_0, nb, w, x, xStride, nx, out, outStride)
}

func panelMXFP4Go(nb int, w, x []byte, xStride, nx int, out []float32, outStride int) {
	panelProductGo(MXFP4, nb, w, x, xStride, nx, out, outStride)
}

func panelQ4KGo(nb int, w, x []byte, xStride, nx int, out []float32, outStride int) {
	panelProductGo(Q4_K, nb, w, x, xStride, nx, out, outStride)
}

func panelQ6KGo(nb int, w, x []byte, xStride, nx int, out []float32, outStride int) {
	panelProductGo(Q6_K, nb, w, x, xStride, nx, out, outStride)
}

// panelProductGo is the pure-Go twin of the assembly panel kernels (see panelKernel) for one
// panel of wt (Q8_0, Q4_0, Q4_K or Q6_K): nb blocks of PanelRows rows at w times nx activation
// rows at x, x+xStride, ... (Q8_0 blocks for the 32-element types, Q8_K for the K-quants);
// column j's PanelRows results go to out[j*outStride:].
func panelProductGo(wt Type, nb int, w, x []byte, xStride, nx int, out []float32, outStride int) {
	bb, xbb := PanelRows*wt.TypeSize(), q8_0Bytes // bytes per block of the panel and of x
	if wt == Q4_K || wt == Q6_K {
		xbb = q8_KBytes
	}
	for j := 0; j < nx; j++ {
		var acc [PanelRows]float32
		for b := 0; b < nb; b++ {
			pb := w[b*bb : (b+1)*bb]
			xb := x[j*xStride+b*xbb : j*xStride+(b+1)*xbb]
			switch wt {
			case Q4_K:
				panelQ4KBlock(pb, xb, f32At(xb), &acc)
			case Q6_K:
				panelQ6KBlock(pb, xb, f32At(xb), &acc)
			default:
				panelQ32Block(wt, pb, xb, f16At(xb), &acc)
			}
		}
		copy(out[j*outStride:j*outStride+PanelRows], acc[:])
	}
}

// panelQ32Block adds to acc[r] row r's product of the Q8_0, Q4_0 or MXFP4 panel block pb with
// the Q8_0 block xb of scale dx.
func panelQ32Block(wt Type, pb, xb []byte, dx float32, acc *[PanelRows]float32) {
	xb = xb[:q8_0Bytes] // a constant length: fewer bounds checks below
	q := pb[PanelRows*q32ScaleBytes(wt):]
	for r := 0; r < PanelRows; r++ {
		var s int32
		for i := 0; i < 32; i++ {
			s += panelQuant(wt, q, r, i) * int32(int8(xb[2+i]))
		}
		acc[r] += float32(s) * (panelScale(wt, pb, r) * dx)
	}
}

// panelScale is row r's scale in the packed 32-element block pb of wt.
func panelScale(wt Type, pb []byte, r int) float32 {
	if wt == MXFP4 {
		return e8m0Half(pb[r])
	}
	return f16At(pb[2*r:])
}

// panelQuant is element i of row r in the quants q of a packed block of wt (the block's bytes
// after the scales): the integer weight (Q4_0's nibble minus 8, MXFP4's table value).
func panelQuant(wt Type, q []byte, r, i int) int32 {
	if wt == Q8_0 {
		return int32(int8(q[32*(i/4)+4*r+i%4]))
	}
	v := q[32*(i%16/4)+4*r+i%4]
	if i >= 16 {
		v >>= 4
	}
	if wt == MXFP4 {
		return int32(mxfp4Values[v&0xf])
	}
	return int32(v&0xf) - 8
}

// q4SumsGo is the pure-Go twin of q4SumsAVX2: for block b < nb of activation row j < nx (at
// x[j*xStride:]), dst[8b+j] = mul·Σ of its 32 quants and dst[8b+4+j] its f16 scale as float32
// bits. |mul| <= 128.
func q4SumsGo(nb int, x []byte, xStride, nx int, mul int32, dst []int32) {
	for b := 0; b < nb; b++ {
		for j := 0; j < nx; j++ {
			blk := x[j*xStride+b*q8_0Bytes : j*xStride+(b+1)*q8_0Bytes]
			var s int32
			for _, q := range blk[2:] {
				s += int32(int8(q))
			}
			dst[sumWords*b+j] = mul * s
			dst[sumWords*b+4+j] = int32(math.Float32bits(F16ToF32(binary.LittleEndian.Uint16(blk))))
		}
	}
}

// panelBlockBytes is how many packed weight bytes MatMulPacked applies to every token before the
// next panels: they stay in L2 while the tokens' activations stream past.
const panelBlockBytes = 64 << 10

// MatMulPacked is MatMul for weights packed by PackRows: out[t*outStride+r] = row r · activation
// row t for r in [r0, r1) and t in [0, nTok). r0 and r1 must be multiples of 8; xq holds nTok
// activation rows of ActType(wt) (QuantizeAct). Like MatMul it writes only those outputs, so
// goroutines may share out with disjoint row ranges, and it does not allocate. Shapes that do not
// fit panic.
func MatMulPacked(wt Type, k int, w []byte, xq []byte, nTok int, out []float32, outStride int, r0, r1 int) {
	if r1 <= r0 || nTok <= 0 {
		return
	}
	checkPacked("MatMulPacked", wt, k, w, xq, nTok, out, outStride, r0, r1)
	// The sums' buffers stay on the stack (noescape.go): the kernels keep nothing.
	if !needsSums(wt) {
		matmulPanels(wt, k, w, xq, nTok, out, outStride, r0, r1, nil, false)
		return
	}
	if SumsLen(wt, k, nTok) <= smallSums {
		var sums [smallSums]int32 // zeroing 8 KiB is cheap next to one token's matmul
		matmulPanels(wt, k, w, xq, nTok, out, outStride, r0, r1, noescape(sums[:]), false)
		return
	}
	var sums [largeSums]int32
	matmulPanels(wt, k, w, xq, nTok, out, outStride, r0, r1, noescape(sums[:]), false)
}

// SumsLen is how many int32 of activation sums PanelSums writes for nTok activation rows of k
// elements for weights of type wt on this CPU: 0 where wt's panel kernels take none.
func SumsLen(wt Type, k, nTok int) int {
	if !needsSums(wt) {
		return 0
	}
	return sumWords * (k / 32) * ((nTok + MaxCols - 1) / MaxCols)
}

// PanelSums writes into dst[:SumsLen(wt, k, nTok)] the activation sums that the panel kernels of
// wt take for the nTok activation rows in xq (ActType(wt), k elements each). A caller that
// splits one matmul over goroutines computes them once and hands them to every
// MatMulPackedSums, where MatMulPacked would compute them again in each.
func PanelSums(wt Type, k int, xq []byte, nTok int, dst []int32) {
	n := SumsLen(wt, k, nTok)
	if n == 0 {
		return
	}
	nb, xRow := k/32, ActType(wt).RowSize(k)
	if len(xq) < nTok*xRow || len(dst) < n {
		panic(fmt.Sprintf("quant.PanelSums: %d activation rows of %d bytes in %d bytes, %d sums in %d", nTok, xRow, len(xq), n, len(dst)))
	}
	for t0 := 0; t0 < nTok; t0 += MaxCols {
		g := t0 / MaxCols * sumWords * nb
		panelSums(wt, nb, xq[t0*xRow:], xRow, min(MaxCols, nTok-t0), dst[g:g+sumWords*nb])
	}
}

// MatMulPackedSums is MatMulPacked with the activation sums computed beforehand by PanelSums
// (nil where SumsLen is 0).
func MatMulPackedSums(wt Type, k int, w, xq []byte, sums []int32, nTok int, out []float32, outStride int, r0, r1 int) {
	if r1 <= r0 || nTok <= 0 {
		return
	}
	checkPacked("MatMulPackedSums", wt, k, w, xq, nTok, out, outStride, r0, r1)
	if n := SumsLen(wt, k, nTok); len(sums) < n {
		panic(fmt.Sprintf("quant.MatMulPackedSums: %d activation sums, want %d", len(sums), n))
	}
	matmulPanels(wt, k, w, xq, nTok, out, outStride, r0, r1, sums, true)
}

// checkPacked panics with a message naming fn where the shapes of a packed matmul do not fit.
func checkPacked(fn string, wt Type, k int, w, xq []byte, nTok int, out []float32, outStride, r0, r1 int) {
	rowBytes, xRow := wt.RowSize(k), ActType(wt).RowSize(k)
	switch {
	case !packable(wt, k):
		panic(fmt.Sprintf("quant.%s: %d elements of %v are not packed weights", fn, k, wt))
	case r0 < 0 || r0%PanelRows != 0 || r1%PanelRows != 0 || len(w) < r1*rowBytes:
		panic(fmt.Sprintf("quant.%s: rows [%d, %d) of %d bytes are not whole panels of %d weight bytes", fn, r0, r1, rowBytes, len(w)))
	case len(xq) < nTok*xRow:
		panic(fmt.Sprintf("quant.%s: %d activation rows of %d bytes do not fit in %d bytes", fn, nTok, xRow, len(xq)))
	case (nTok > 1 && outStride < r1) || len(out) < (nTok-1)*outStride+r1:
		panic(fmt.Sprintf("quant.%s: out of %d floats with stride %d cannot hold %d tokens x %d rows", fn, len(out), outStride, nTok, r1))
	}
}

// Capacities of MatMulPacked's stack buffers of activation sums (sumWords per block and group of
// 4 tokens): the large one holds 23 groups at k=5632, 64 at k=2048. (128 KiB is the most the
// compiler keeps on the stack.)
const smallSums, largeSums = 2 << 10, 32 << 10

// maxPackedK is the longest row MatMulPacked takes: one group of sums must fit largeSums.
const maxPackedK = 32 * largeSums / sumWords

// matmulPanels is MatMulPacked's loop, with a buffer for activation sums (needsSums): the
// sums of all nTok tokens when ready, else scratch from the caller's stack, filled for chunks of
// tokens whose sums fit in it. Within a chunk, blocks of panels of about panelBlockBytes are
// applied to every token group before the next block is touched.
func matmulPanels(wt Type, k int, w, xq []byte, nTok int, out []float32, outStride, r0, r1 int, sums []int32, ready bool) {
	nb := k / wt.BlockSize()
	rowBytes, xRow := wt.RowSize(k), ActType(wt).RowSize(k)
	panel := PanelRows * rowBytes
	chunk, ws := nTok, needsSums(wt)
	if ws && !ready {
		chunk = len(sums) / (sumWords * nb) * MaxCols
	}
	// A multiple of 4 panels: the AVX-512 kernels run them in fours (the AVX2 Q8_0/Q4_0 ones in
	// pairs), and a smaller block would leave the rest to the pair or one-panel kernels in every
	// block.
	blockRows := max(4, panelBlockBytes/panel&^3) * PanelRows
	if nTok <= MaxCols {
		blockRows = r1 - r0 // one token group: nothing to keep in L2 for the next one
	}
	for c0 := 0; c0 < nTok; c0 += chunk {
		c1 := min(nTok, c0+chunk)
		if ws && !ready {
			for t0 := c0; t0 < c1; t0 += MaxCols {
				g := (t0 - c0) / MaxCols * sumWords * nb
				panelSums(wt, nb, xq[t0*xRow:], xRow, min(MaxCols, c1-t0), sums[g:g+sumWords*nb])
			}
		}
		for rb := r0; rb < r1; rb += blockRows {
			re := min(r1, rb+blockRows)
			for t0 := c0; t0 < c1; t0 += MaxCols {
				nx := min(MaxCols, c1-t0)
				x := xq[t0*xRow : (t0+nx)*xRow]
				s := sums
				if ws {
					s = sums[(t0-c0)/MaxCols*sumWords*nb:]
				}
				o := out[t0*outStride+rb : (t0+nx-1)*outStride+re]
				panelKernel(wt, (re-rb)/PanelRows, nb, w[rb*rowBytes:re*rowBytes], x, xRow, nx, o, outStride, s)
			}
		}
	}
}
