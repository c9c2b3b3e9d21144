package ops

// The tiled attention runs the AVX-512 assembly of attn_tile_amd64.s where the selected path runs
// it (runsAsm, kernels.go): on avx512vnni, whose CPUs have AVX-512 F. The other paths have no
// tiled kernel; there AttnTiledFast is false and the runner keeps the exact kernels.

//go:noescape
func attnTileStepAVX512(qt *float32, hd int, kt, vt *float32, cpos, pos, lo *int32, softcap, inv float32, m, l, ot *float32)

//go:noescape
func attnTileLoadF16AVX512(dst *float32, k *uint16, cells *int32, strideB, hd int)

//go:noescape
func attnTileLoadQ8AVX512(dst *float32, k *byte, cells *int32, strideB, hd int)

func attnTileStep(r *TileRows, hd int, kt, vt []float32, cpos []int32, softcap float32) {
	if !(softcap > 0) {
		softcap = 0
	}
	if !runsAsm(opTileStep) {
		attnTileStepGo(r, hd, kt, vt, cpos, softcap)
		return
	}
	var inv float32
	if softcap > 0 {
		inv = 1 / softcap
	}
	attnTileStepAVX512(&r.QT[0], hd, &kt[0], &vt[0], &cpos[0], &r.Pos[0], &r.Lo[0], softcap, inv, &r.M[0], &r.L[0], &r.OT[0])
}

func attnTileLoadF16(dst []float32, k []uint16, cells []int32, stride, hd int) {
	if !runsAsm(opTileLoadF16) || hd%8 != 0 {
		attnTileLoadF16Go(dst, k, cells, stride, hd)
		return
	}
	attnTileLoadF16AVX512(&dst[0], &k[0], &cells[0], 2*stride, hd)
}

func attnTileLoadQ8(dst []float32, k []byte, cells []int32, strideB, hd int) {
	if !runsAsm(opTileLoadQ8) {
		attnTileLoadQ8Go(dst, k, cells, strideB, hd)
		return
	}
	attnTileLoadQ8AVX512(&dst[0], &k[0], &cells[0], strideB, hd)
}
