package quant

import "ubatch/internal/cpu"

//go:noescape
func q8PanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4PanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q8Panel2AVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4Panel2AVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func mxfp4PanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4SumsAVX2(nb int, x *byte, xStride, nx int, mul int32, dst *int32)

// The AVX2 panel kernels (the sums multipliers: see sumsMul); the K-quants' are in
// packed_k_amd64.go.
func init() {
	setPanel(Q8_0, cpu.AVX2, asmPanelQuads(Q8_0, nil, q8Panel2AVX2, q8PanelAVX2), 0)
	setPanel(Q4_0, cpu.AVX2, asmPanelQuads(Q4_0, nil, q4Panel2AVX2, q4PanelAVX2), 8)
	// MXFP4 has the one-panel kernel only (packed_mxfp4_amd64.s), for every column count.
	setPanel(MXFP4, cpu.AVX2, asmPanel(MXFP4, mxfp4PanelAVX2), 12)
}

// quadCols is the fewest columns for which asmPanelQuads runs the four-panel kernel. Decode (one
// column) streams the weights from memory and runs the one-panel kernels (see asmPanelQuads);
// with two columns the four-panel kernel was 15-25% faster on an AMD EPYC Zen 5 than the pair
// kernel.
const quadCols = 2

// asmPanelQuads is asmPanel for three kernels of one computation: one that runs four panels at
// once (np a multiple of 4), used for quadCols columns or more (nil: none, as on AVX2), one that
// runs two (np even) and one that runs a last odd panel alone, or all of them for one column.
func asmPanelQuads(wt Type, quad, pair, one panelAsm) panelFunc {
	return func(np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, sums []int32) {
		checkPanelArgs(wt, np, nb, w, x, xStride, nx, out, outStride)
		_ = sums[sumWords*nb-1]
		if nx == 1 {
			// Decode: one panel after the other is one sequential stream of the weights, which
			// the prefetchers follow better than the pair kernel's two streams a panel apart
			// (small Q8_0 tg64 327-369 t/s against 265-298, tinyllama Q4_0 61-66 against 51-52,
			// AMD EPYC Zen 5).
			one(np, nb, &w[0], &x[0], xStride, nx, &out[0], outStride, &sums[0])
			return
		}
		p := 0
		if quad != nil && nx >= quadCols {
			if p = np &^ 3; p > 0 {
				quad(p, nb, &w[0], &x[0], xStride, nx, &out[0], outStride, &sums[0])
			}
		}
		if even := (np - p) &^ 1; even > 0 {
			pair(even, nb, &w[p*PanelRows*nb*wt.TypeSize()], &x[0], xStride, nx, &out[p*PanelRows], outStride, &sums[0])
			p += even
		}
		if p < np {
			one(1, nb, &w[p*PanelRows*nb*wt.TypeSize()], &x[0], xStride, nx, &out[p*PanelRows], outStride, &sums[0])
		}
	}
}

// panelAsm is an assembly panel kernel that takes activation sums (Q8_0, Q4_0), panelAsmK one that
// takes none (Q4_K, Q6_K): np panels of nb blocks at w, nx activation rows at x, x+xStride, ...,
// results to out[j*outStride+r]. All pointers must be valid for the whole shape.
type (
	panelAsm  func(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
	panelAsmK func(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)
)

// asmPanel makes the panelFunc of the assembly kernel k for weights of type wt: checkPanelArgs first
// checks the ranges k reads and writes.
func asmPanel(wt Type, k panelAsm) panelFunc {
	return func(np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, sums []int32) {
		checkPanelArgs(wt, np, nb, w, x, xStride, nx, out, outStride)
		_ = sums[sumWords*nb-1]
		k(np, nb, &w[0], &x[0], xStride, nx, &out[0], outStride, &sums[0])
	}
}

// asmPanelK is asmPanel for the kernels that take no sums.
func asmPanelK(wt Type, k panelAsmK) panelFunc {
	return func(np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, _ []int32) {
		checkPanelArgs(wt, np, nb, w, x, xStride, nx, out, outStride)
		k(np, nb, &w[0], &x[0], xStride, nx, &out[0], outStride)
	}
}

// checkPanelArgs panics with an index error unless w, x and out hold the ranges a panel kernel of wt
// reads and writes for np panels of nb blocks and nx activation rows (see panelKernel).
// MatMulPacked has checked the shapes, so the indexes cost little.
func checkPanelArgs(wt Type, np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int) {
	_ = w[np*PanelRows*nb*wt.TypeSize()-1]
	_ = x[(nx-1)*xStride+nb*ActType(wt).TypeSize()-1]
	_ = out[(nx-1)*outStride+np*PanelRows-1]
}

// q4SumsPaths is, by selected path, the path whose activation sums run: q4Sums (AVX2) on every
// amd64 path, the Go twin on "go".
var q4SumsPaths = cpu.Resolve(cpu.AVX2)

// q4Sums is q4SumsGo for AVX2.
func q4Sums(nb int, x []byte, xStride, nx int, mul int32, dst []int32) {
	_ = x[(nx-1)*xStride+nb*q8_0Bytes-1]
	_ = dst[sumWords*nb-1]
	q4SumsAVX2(nb, &x[0], xStride, nx, mul, &dst[0])
}
