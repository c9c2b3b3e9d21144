package ops

// The row kernel's assembly (attn_row_amd64.s, written by internal/attngen), on the same path as
// the lane kernel's (attnTileAsm).

//go:noescape
func attnRowStep1AVX512(q *float32, hd int, ktT, vt *float32, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int)

//go:noescape
func attnRowStep2AVX512(q *float32, hd int, ktT, vt *float32, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int)

//go:noescape
func attnRowStep3AVX512(q *float32, hd int, ktT, vt *float32, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int)

//go:noescape
func attnRowStep4AVX512(q *float32, hd int, ktT, vt *float32, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int)

//go:noescape
func attnTileLoadKTF16AVX512(dst *float32, k *uint16, cells *int32, strideB, hd int)

//go:noescape
func attnTileLoadKTF32AVX512(dst *float32, k *float32, cells *int32, strideB, hd int)

//go:noescape
func attnTileLoadKTQ8AVX512(dst *float32, k *byte, cells *int32, strideB, hd int)

// attnRowStep is AttnRowStep after its checks (softcap 0 or > 0).
func attnRowStep(r *TileRowSet, hd int, ktT, vt []float32, cpos []int32, softcap float32) {
	if !attnTileAsm() {
		attnRowStepGo(r, hd, ktT, vt, cpos, softcap)
		return
	}
	var inv float32
	if softcap > 0 {
		inv = 1 / softcap
	}
	q, kp, vp, cp, pos, lo := &r.Q[0], &ktT[0], &vt[0], &cpos[0], &r.Pos[0], &r.Lo[0]
	m, l, o, scr, tiles := &r.M[0], &r.L[0], &r.O[0], &r.scr[0], len(cpos)/TileCells
	switch r.N { // one kernel per count of rows, unrolled over them
	case 1:
		attnRowStep1AVX512(q, hd, kp, vp, cp, pos, lo, softcap, inv, m, l, o, scr, tiles)
	case 2:
		attnRowStep2AVX512(q, hd, kp, vp, cp, pos, lo, softcap, inv, m, l, o, scr, tiles)
	case 3:
		attnRowStep3AVX512(q, hd, kp, vp, cp, pos, lo, softcap, inv, m, l, o, scr, tiles)
	default:
		attnRowStep4AVX512(q, hd, kp, vp, cp, pos, lo, softcap, inv, m, l, o, scr, tiles)
	}
}

func attnTileLoadKTF16(dst []float32, k []uint16, cells []int32, stride, hd int) {
	if !attnTileAsm() {
		attnTileLoadKTF16Go(dst, k, cells, stride, hd)
		return
	}
	attnTileLoadKTF16AVX512(&dst[0], &k[0], &cells[0], 2*stride, hd)
}

func attnTileLoadKTF32(dst []float32, k []float32, cells []int32, stride, hd int) {
	if !attnTileAsm() {
		attnTileLoadKTF32Go(dst, k, cells, stride, hd)
		return
	}
	attnTileLoadKTF32AVX512(&dst[0], &k[0], &cells[0], 4*stride, hd)
}

func attnTileLoadKTQ8(dst []float32, k []byte, cells []int32, strideB, hd int) {
	if !attnTileAsm() {
		attnTileLoadKTQ8Go(dst, k, cells, strideB, hd)
		return
	}
	attnTileLoadKTQ8AVX512(&dst[0], &k[0], &cells[0], strideB, hd)
}
