package quant

// AVX-512 VNNI panel kernels for packed Q8_0 and Q4_0 weights (packed_vnni_amd64.s): the AVX2
// kernels' computation with VPDPBUSD for the products. Both take activation sums (panelSums):
// 128·Σx per block and column for Q8_0, 8·Σx for Q4_0.

//go:noescape
func q8PanelVNNI(nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4PanelVNNI(nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

// panelVNNI512 is the panelKernel for AVX-512 VNNI, for the types hasVNNIPanel reports. Like
// panelAVX2 it checks the ranges the assembly reads and writes.
func panelVNNI512(wt Type, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, sums []int32) {
	_ = w[PanelRows*nb*wt.TypeSize()-1]
	_ = x[(nx-1)*xStride+nb*q8_0Bytes-1]
	_ = out[(nx-1)*outStride+PanelRows-1]
	_ = sums[4*nb-1]
	switch wt {
	case Q8_0:
		q8PanelVNNI(nb, &w[0], &x[0], xStride, nx, &out[0], outStride, &sums[0])
	case Q4_0:
		q4PanelVNNI(nb, &w[0], &x[0], xStride, nx, &out[0], outStride, &sums[0])
	default:
		panic("quant: no AVX-512 VNNI panel kernel for " + wt.String())
	}
}
