package quant

//go:noescape
func q8PanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4PanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4SumsAVX2(nb int, x *byte, xStride, nx int, mul int32, dst *int32)

func init() {
	if hasAVX2 {
		hasPanelAsm = true
	}
}

// panelAVX2 is the panelKernel for AVX2. The index expressions check the ranges the assembly
// reads and writes (see panelKernel); MatMulPacked has checked the shapes, so they cost little.
func panelAVX2(wt Type, np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, sums []int32) {
	pb := PanelRows * nb * wt.TypeSize()
	_ = w[np*pb-1]
	_ = x[(nx-1)*xStride+nb*ActType(wt).TypeSize()-1]
	_ = out[(nx-1)*outStride+np*PanelRows-1]
	switch wt {
	case Q8_0:
		_ = sums[sumWords*nb-1]
		q8PanelAVX2(np, nb, &w[0], &x[0], xStride, nx, &out[0], outStride, &sums[0])
	case Q4_0:
		_ = sums[sumWords*nb-1]
		q4PanelAVX2(np, nb, &w[0], &x[0], xStride, nx, &out[0], outStride, &sums[0])
	case Q4_K:
		q4KPanelAVX2(np, nb, &w[0], &x[0], xStride, nx, &out[0], outStride)
	case Q6_K:
		q6KPanelAVX2(np, nb, &w[0], &x[0], xStride, nx, &out[0], outStride)
	}
}

// q4Sums is q4SumsGo for AVX2.
func q4Sums(nb int, x []byte, xStride, nx int, mul int32, dst []int32) {
	_ = x[(nx-1)*xStride+nb*q8_0Bytes-1]
	_ = dst[sumWords*nb-1]
	q4SumsAVX2(nb, &x[0], xStride, nx, mul, &dst[0])
}
