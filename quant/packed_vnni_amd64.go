package quant

// VNNI panel kernels: the AVX2 kernels' computation with VPDPBUSD (VPDPWSSD for Q6_K) for the
// products. Q8_0 and Q4_0: EVEX-encoded with embedded broadcasts for AVX-512 VNNI
// (packed_vnni_amd64.s) and VEX-encoded for AVX-VNNI (packed_avxvnni_amd64.s, with its
// EVEX-encoded test twin); they take activation sums (panelSums with m = -128: the starting value
// of each block's integer sums, and the blocks' scales). Q4_K and Q6_K: AVX-512 VNNI only
// (packed_k_vnni_amd64.s), no sums.

//go:noescape
func q8PanelVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4PanelVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4KPanelVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)

//go:noescape
func q6KPanelVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)

//go:noescape
func q8PanelAVXVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4PanelAVXVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q8PanelAVXVNNIEvex(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4PanelAVXVNNIEvex(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

// panelVNNI is the panelKernel of VNNI path p for the types hasVNNIPanel reports. Like
// panelAVX2 it checks the ranges the assembly reads and writes (Q4_K and Q6_K take no sums). The
// kernels are called directly, not through function values, so that the arguments do not escape.
func panelVNNI(p kernelPath, wt Type, np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, sums []int32) {
	pb := PanelRows * nb * wt.TypeSize()
	_ = w[np*pb-1]
	_ = x[(nx-1)*xStride+nb*ActType(wt).TypeSize()-1]
	_ = out[(nx-1)*outStride+np*PanelRows-1]
	switch {
	case wt == Q4_K && p == pathAVX512VNNI:
		q4KPanelVNNI(np, nb, &w[0], &x[0], xStride, nx, &out[0], outStride)
		return
	case wt == Q6_K && p == pathAVX512VNNI:
		q6KPanelVNNI(np, nb, &w[0], &x[0], xStride, nx, &out[0], outStride)
		return
	}
	_ = sums[sumWords*nb-1]
	pw, px, po, ps := &w[0], &x[0], &out[0], &sums[0]
	switch {
	case wt == Q8_0 && p == pathAVX512VNNI:
		q8PanelVNNI(np, nb, pw, px, xStride, nx, po, outStride, ps)
	case wt == Q4_0 && p == pathAVX512VNNI:
		q4PanelVNNI(np, nb, pw, px, xStride, nx, po, outStride, ps)
	case wt == Q8_0 && p == pathAVXVNNI:
		q8PanelAVXVNNI(np, nb, pw, px, xStride, nx, po, outStride, ps)
	case wt == Q4_0 && p == pathAVXVNNI:
		q4PanelAVXVNNI(np, nb, pw, px, xStride, nx, po, outStride, ps)
	case wt == Q8_0 && p == pathAVXVNNIEvex:
		q8PanelAVXVNNIEvex(np, nb, pw, px, xStride, nx, po, outStride, ps)
	case wt == Q4_0 && p == pathAVXVNNIEvex:
		q4PanelAVXVNNIEvex(np, nb, pw, px, xStride, nx, po, outStride, ps)
	default:
		panic("quant: no " + p.String() + " panel kernel for " + wt.String())
	}
}
