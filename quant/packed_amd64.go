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
func q4SumsAVX2(nb int, x *byte, xStride, nx int, mul int32, dst *int32)

// The AVX2 panel kernels (the sums multipliers: see sumsMul); the K-quants' are in
// packed_k_amd64.go.
func init() {
	setPanel(Q8_0, cpu.AVX2, asmPanelPairs(Q8_0, q8Panel2AVX2, q8PanelAVX2), 0)
	setPanel(Q4_0, cpu.AVX2, asmPanelPairs(Q4_0, q4Panel2AVX2, q4PanelAVX2), 8)
}

// pairCols is the fewest columns for which asmPanelPairs runs the two-panel kernel.
const pairCols = 2

// asmPanelPairs is asmPanel for two kernels of one computation: one that runs two panels at once
// (np even), used for pairCols columns or more, and one that runs the rest one panel at a time.
func asmPanelPairs(wt Type, pair, one panelAsm) panelFunc {
	return func(np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, sums []int32) {
		checkPanelArgs(wt, np, nb, w, x, xStride, nx, out, outStride)
		_ = sums[sumWords*nb-1]
		p := 0
		if nx >= pairCols {
			if p = np &^ 1; p > 0 {
				pair(p, nb, &w[0], &x[0], xStride, nx, &out[0], outStride, &sums[0])
			}
		}
		if p < np {
			one(np-p, nb, &w[p*PanelRows*nb*wt.TypeSize()], &x[0], xStride, nx, &out[p*PanelRows], outStride, &sums[0])
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

// hasSumsAsm says that q4Sums exists here.
const hasSumsAsm = true

// q4Sums is q4SumsGo for AVX2.
func q4Sums(nb int, x []byte, xStride, nx int, mul int32, dst []int32) {
	_ = x[(nx-1)*xStride+nb*q8_0Bytes-1]
	_ = dst[sumWords*nb-1]
	q4SumsAVX2(nb, &x[0], xStride, nx, mul, &dst[0])
}
