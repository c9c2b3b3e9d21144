package ops

import "unsafe"

// The row kernel's assembly (attn_row_amd64.s, written by internal/attngen), on the same path as
// the lane kernel's (avx512vnni, see kernels_amd64.go).

//go:noescape
func attnRowStep1F32AVX512(q *float32, hd int, ktT *float32, v *float32, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int, vcells *int32, vstrideB int)

//go:noescape
func attnRowStep2F32AVX512(q *float32, hd int, ktT *float32, v *float32, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int, vcells *int32, vstrideB int)

//go:noescape
func attnRowStep3F32AVX512(q *float32, hd int, ktT *float32, v *float32, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int, vcells *int32, vstrideB int)

//go:noescape
func attnRowStep4F32AVX512(q *float32, hd int, ktT *float32, v *float32, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int, vcells *int32, vstrideB int)

//go:noescape
func attnRowStep1F16AVX512(q *float32, hd int, ktT *float32, v *uint16, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int, vcells *int32, vstrideB int)

//go:noescape
func attnRowStep2F16AVX512(q *float32, hd int, ktT *float32, v *uint16, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int, vcells *int32, vstrideB int)

//go:noescape
func attnRowStep3F16AVX512(q *float32, hd int, ktT *float32, v *uint16, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int, vcells *int32, vstrideB int)

//go:noescape
func attnRowStep4F16AVX512(q *float32, hd int, ktT *float32, v *uint16, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int, vcells *int32, vstrideB int)

// attnTilePrefetch prefetches the K and V rows of n cells: rowBytes from byte cells[i]·strideB
// of k and of v.
//
//go:noescape
func attnTilePrefetch(k, v unsafe.Pointer, cells *int32, n, strideB, rowBytes int)

// attnTilePrefetch2L is attnTilePrefetch for rows of two whole cache lines (rowBytes 128, k, v
// and strideB multiples of 64).
//
//go:noescape
func attnTilePrefetch2L(k, v unsafe.Pointer, cells *int32, n, strideB int)

//go:noescape
func attnTileLoadKTF16AVX512(dst *float32, k *uint16, cells *int32, strideB, hd int)

//go:noescape
func attnTileLoadKTF32AVX512(dst *float32, k *float32, cells *int32, strideB, hd int)

//go:noescape
func attnTileLoadKTQ8AVX512(dst *float32, k *byte, cells *int32, strideB, hd int)

// attnRowStep is AttnRowStep after its checks (softcap 0 or > 0).
func attnRowStep(r *TileRowSet, hd int, ktT []float32, v *TileV, cpos []int32, softcap float32) {
	if !runsAsm(opRowStep) {
		attnRowStepGo(r, hd, ktT, v, cpos, softcap)
		return
	}
	var inv float32
	if softcap > 0 {
		inv = 1 / softcap
	}
	q, kp, cp, pos, lo := &r.Q[0], &ktT[0], &cpos[0], &r.Pos[0], &r.Lo[0]
	m, l, o, scr, tiles, vc := &r.M[0], &r.L[0], &r.O[0], &r.scr[0], len(cpos)/TileCells, &v.Cells[0]
	if v.F16 != nil {
		vp, vs := &v.F16[0], 2*v.Stride
		switch r.N { // one kernel per count of rows, unrolled over them
		case 1:
			attnRowStep1F16AVX512(q, hd, kp, vp, cp, pos, lo, softcap, inv, m, l, o, scr, tiles, vc, vs)
		case 2:
			attnRowStep2F16AVX512(q, hd, kp, vp, cp, pos, lo, softcap, inv, m, l, o, scr, tiles, vc, vs)
		case 3:
			attnRowStep3F16AVX512(q, hd, kp, vp, cp, pos, lo, softcap, inv, m, l, o, scr, tiles, vc, vs)
		default:
			attnRowStep4F16AVX512(q, hd, kp, vp, cp, pos, lo, softcap, inv, m, l, o, scr, tiles, vc, vs)
		}
		return
	}
	vp, vs := &v.F32[0], 4*v.Stride
	switch r.N {
	case 1:
		attnRowStep1F32AVX512(q, hd, kp, vp, cp, pos, lo, softcap, inv, m, l, o, scr, tiles, vc, vs)
	case 2:
		attnRowStep2F32AVX512(q, hd, kp, vp, cp, pos, lo, softcap, inv, m, l, o, scr, tiles, vc, vs)
	case 3:
		attnRowStep3F32AVX512(q, hd, kp, vp, cp, pos, lo, softcap, inv, m, l, o, scr, tiles, vc, vs)
	default:
		attnRowStep4F32AVX512(q, hd, kp, vp, cp, pos, lo, softcap, inv, m, l, o, scr, tiles, vc, vs)
	}
}

func attnTileLoadKTF16(dst []float32, k []uint16, cells []int32, stride, hd int) {
	if !runsAsm(opTileLoadKTF16) {
		attnTileLoadKTF16Go(dst, k, cells, stride, hd)
		return
	}
	attnTileLoadKTF16AVX512(&dst[0], &k[0], &cells[0], 2*stride, hd)
}

func attnTileLoadKTF32(dst []float32, k []float32, cells []int32, stride, hd int) {
	if !runsAsm(opTileLoadKTF32) {
		attnTileLoadKTF32Go(dst, k, cells, stride, hd)
		return
	}
	attnTileLoadKTF32AVX512(&dst[0], &k[0], &cells[0], 4*stride, hd)
}

func attnTileLoadKTQ8(dst []float32, k []byte, cells []int32, strideB, hd int) {
	if !runsAsm(opTileLoadKTQ8) {
		attnTileLoadKTQ8Go(dst, k, cells, strideB, hd)
		return
	}
	attnTileLoadKTQ8AVX512(&dst[0], &k[0], &cells[0], strideB, hd)
}

func tilePrefetch(k, v unsafe.Pointer, cells []int32, strideB, rowBytes int) {
	if !runsAsm(opTilePrefetch) || len(cells) == 0 || rowBytes <= 0 {
		return
	}
	if rowBytes == 128 && (uintptr(k)|uintptr(v)|uintptr(strideB))%64 == 0 { // F16 rows of hd 64
		attnTilePrefetch2L(k, v, &cells[0], len(cells), strideB)
		return
	}
	attnTilePrefetch(k, v, &cells[0], len(cells), strideB, rowBytes)
}
