package quant

import "ubatch/internal/cpu"

// VNNI panel kernels: the AVX2 kernels' computation with VPDPBUSD (VPDPWSSD for Q6_K) for the
// products. Q8_0 and Q4_0: EVEX-encoded with embedded broadcasts for AVX-512 VNNI
// (packed_vnni_amd64.s; on 512-bit registers, two panels at once in packed_vnni512_amd64.s and
// four in packed_vnni512q_amd64.s) and VEX-encoded for AVX-VNNI (packed_avxvnni_amd64.s, with its
// EVEX-encoded test twin); they take activation sums (panelSums with m = -128: the starting value
// of each block's integer sums, and the blocks' scales). Q4_K and Q6_K: AVX-512 VNNI only
// (packed_k_vnni_amd64.s; two panels at once in packed_k_vnni512_amd64.s and four in
// packed_k_vnni512q_amd64.s), no sums; on AVX-VNNI they run the AVX2 kernels.

func init() {
	setPanel(Q8_0, cpu.AVX512VNNI, asmPanelQuads(Q8_0, q8Panel4VNNI, q8Panel2VNNI, q8PanelVNNI), -128)
	setPanel(Q4_0, cpu.AVX512VNNI, asmPanelQuads(Q4_0, q4Panel4VNNI, q4Panel2VNNI, q4PanelVNNI), -128)
	q4K, q6K := asmPanelK(Q4_K, q4KPanelVNNI), asmPanelK(Q6_K, q6KPanelVNNI)
	if cpu.HasAVX512BW { // the zmm K-quant kernels' byte and word instructions
		q4K = asmPanelQuadsK(Q4_K, q4KPanel4VNNI, q4KPanel2VNNI, q4KPanelVNNI)
		q6K = asmPanelQuadsK(Q6_K, q6KPanel4VNNI, q6KPanel2VNNI, q6KPanelVNNI)
	}
	setPanel(Q4_K, cpu.AVX512VNNI, q4K, 0)
	setPanel(Q6_K, cpu.AVX512VNNI, q6K, 0)
	setPanel(Q8_0, cpu.AVXVNNI, asmPanel(Q8_0, q8PanelAVXVNNI), -128)
	setPanel(Q4_0, cpu.AVXVNNI, asmPanel(Q4_0, q4PanelAVXVNNI), -128)
	setPanel(Q8_0, cpu.AVXVNNIEvex, asmPanel(Q8_0, q8PanelAVXVNNIEvex), -128)
	setPanel(Q4_0, cpu.AVXVNNIEvex, asmPanel(Q4_0, q4PanelAVXVNNIEvex), -128)
}

// asmPanelQuadsK is asmPanelQuads for the kernels that take no sums.
func asmPanelQuadsK(wt Type, quad, pair, one panelAsmK) panelFunc {
	return func(np, nb int, w, x []byte, xStride, nx int, out []float32, outStride int, _ []int32) {
		checkPanelArgs(wt, np, nb, w, x, xStride, nx, out, outStride)
		if nx == 1 { // one stream, as in asmPanelQuads: tinyllama Q4_K_M tg32 59-60 t/s against 51-53
			one(np, nb, &w[0], &x[0], xStride, nx, &out[0], outStride)
			return
		}
		p := 0
		if nx >= quadCols {
			if p = np &^ 3; p > 0 {
				quad(p, nb, &w[0], &x[0], xStride, nx, &out[0], outStride)
			}
		}
		if even := (np - p) &^ 1; even > 0 {
			pair(even, nb, &w[p*PanelRows*nb*wt.TypeSize()], &x[0], xStride, nx, &out[p*PanelRows], outStride)
			p += even
		}
		if p < np {
			one(1, nb, &w[p*PanelRows*nb*wt.TypeSize()], &x[0], xStride, nx, &out[p*PanelRows], outStride)
		}
	}
}

//go:noescape
func q4KPanel4VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)

//go:noescape
func q6KPanel4VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)

//go:noescape
func q6KPanel2VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)

//go:noescape
func q4KPanel2VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)

//go:noescape
func q8Panel4VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4Panel4VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q8Panel2VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

//go:noescape
func q4Panel2VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)

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
