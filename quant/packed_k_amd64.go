package quant

import "ubatch/internal/cpu"

// AVX2 kernels for packed Q4_K and Q6_K panels (packed_k_amd64.s; layout in packed_k.go, Go
// twins panelQ4KGo and panelQ6KGo): 8 rows of nb super-blocks at w times nx (1..MaxCols) Q8_K
// activation rows at x, x+xStride, ..., results to out[j*outStride+r]; asmPanelK checks the
// ranges before calling them. Like the row kernels, they take the Q4_K mins and the Q6_K level
// offset from the Q8_K bsums, so activation blocks must be well formed (QuantizeAct).

func init() {
	setPanel(Q4_K, cpu.AVX2, asmPanelK(Q4_K, q4KPanelAVX2), 0)
	setPanel(Q6_K, cpu.AVX2, asmPanelK(Q6_K, q6KPanelAVX2), 0)
}

//go:noescape
func q4KPanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)

//go:noescape
func q6KPanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)
