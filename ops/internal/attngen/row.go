package main

import "fmt"

// rowStep writes attnRowStep<r>AVX512, the row kernel for r query rows (1 <= r <= rowSetRows):
// the scores of rowTiles tiles at once (r·rowTiles independent chains of fused multiply-adds,
// lanes = cells), stored; then tile by tile the soft cap, the mask, the maximum, the weights, the
// sums and the outputs of each row (lanes = dimensions).
//
// Arguments: q (r rows of hd floats), hd, ktT (rowTiles transposed K tiles, column d of tile t
// at float (d·rowTiles+t)·16), v (the V rows: cell j's at byte vcells[j]·vstrideB, float32 or
// halves by the variant), cpos, pos, lo, softcap, inv, m, l, o (r rows of hd floats), scr (the
// scores at byte 256·t + 64·i, the weights at 1024 + 64·i), tiles (1..rowTiles, the tiles the
// state takes), vcells, vstrideB.
//
// Registers: R8 hd·4, R9 3·hd·4 (rowIndex); in the scores SI q, DI ktT, CX the rounds, Z<4i+t>
// the scores of row i and tile t, Z16-Z19 a column of each tile, Z20-Z23 a query of each row.
// In the updates BX the tile's scores, DX its cpos (then its cells), R10 its cells, R11 v, R12
// the weights, the tiles and their cpos in the arguments' slots, CX the rounds over the cells;
// Z20 1/cap, Z21 cap, Z22 ONE, Z23 -Inf, Z24+i row i's rescaling factor, Z29-Z31 the
// exponential's constants; Z0-Z17 the rows' temporaries (rowUpdate), then Z<4i+c> the output
// accumulators and Z16-Z19 the V chunks.
func rowStep(r int, f16 bool) {
	kind, vt, vb := "F32", "float32", 64
	if f16 {
		kind, vt, vb = "F16", "uint16", 32
	}
	name := fmt.Sprintf("%d%s", r, kind)
	fmt.Fprintf(b, `
// func attnRowStep%sAVX512(q *float32, hd int, ktT *float32, v *%s, cpos, pos, lo *int32, softcap, inv float32, m, l, o, scr *float32, tiles int, vcells *int32, vstrideB int)
//
// %d rows; hd > 0 a multiple of 16; softcap 0 (none) or > 0, inv = 1/softcap; 1 <= tiles <= %d;
// the V row of cell j of the tiles at byte vcells[j]·vstrideB of v, %s.
TEXT ·attnRowStep%sAVX512(SB), NOSPLIT, $0-120
`, name, vt, r, rowTiles, vt, name)
	emit("ROWSTEP%d(RVJ%[2]s_1, RVJ%[2]s_2, RVJ%[2]s_3, RVJ%[2]s_4, %d)", r, name, vb)
}

// rowStepMacro writes ROWSTEP<r>(rvj1, rvj2, rvj3, rvj4, vb), the whole of rowStep's kernel for
// r rows, which its float32 and float16 variants share: they differ only in the V rows, read by
// rvj<c> (the variant's RVJ macro of c chunks) with vb bytes to 16 elements (64 or 32). The
// labels are the kernel's own: a TEXT block scopes them.
func rowStepMacro(r int) {
	define(fmt.Sprintf("ROWSTEP%d: rowStep's kernel for r = %d, its V rows read by rvj1-rvj4 with vb bytes to 16 elements.", r, r),
		fmt.Sprintf("ROWSTEP%d(rvj1, rvj2, rvj3, rvj4, vb)", r), func() {
			emit("MOVQ hd+8(FP), R8")
			emit("SHLQ $2, R8")
			emit("LEAQ (R8)(R8*2), R9")
			rowScores(r)

			expConsts()
			emit("VBROADCASTSS %s, Z23", tc("NEGINF"))
			emit("VBROADCASTSS inv+60(FP), Z20")
			emit("VBROADCASTSS softcap+56(FP), Z21")
			emit("LEAQ 1024(BX), R12")
			loads("vcells+104(FP), R10")
			label("rt")
			loads("cpos+32(FP), DX")
			emit("VMOVDQU32 (DX), Z19")
			emit("MOVL softcap+56(FP), AX")
			emit("TESTL AX, AX")
			emit("JZ   rnc")
			for i := 0; i < r; i++ { // the soft cap of the tile's scores
				emit("VMOVUPS %d(BX), Z0", 64*i)
				emit("TCAP(Z0)")
				emit("VMOVUPS Z0, %d(BX)", 64*i)
			}
			label("rnc")
			rowUpdate(r)
			rowValues(r)
			emit("ADDQ $256, BX")
			emit("ADDQ $64, cpos+32(FP)") // the next tile's positions, in the argument slot: DX is the cells' in rowValues
			emit("ADDQ $64, R10")
			emit("DECQ tiles+96(FP)") // the count of tiles left, in its argument slot
			emit("JNZ  rt")
			emit("VZEROUPPER")
			emit("RET")
		})
}

// rowScores writes the scores: Z<4i+t> = Σ_d ktT[d][t] · q[i][d], d in order, two d a round,
// stored to the scratch (BX) at 256·t + 64·i.
func rowScores(r int) {
	emit("ZZERO%d", 4*r)
	loads("q+0(FP), SI", "ktT+16(FP), DI", "hd+8(FP), CX")
	emit("SHRQ $1, CX")
	label("rs")
	for u := 0; u < 2; u++ {
		for t := 0; t < rowTiles; t++ {
			emit("VMOVUPS %d(DI), Z%d", u*rowColBytes+64*t, 16+t)
		}
		for i := 0; i < r; i++ {
			emit("VBROADCASTSS %d(SI)%s, Z%d", 4*u, rowIndex[i], 20+i)
		}
		for i := 0; i < r; i++ {
			for t := 0; t < rowTiles; t++ {
				emit("VFMADD231PS Z%d, Z%d, Z%d", 20+i, 16+t, 4*i+t)
			}
		}
	}
	emit("ADDQ $%d, DI", 2*rowColBytes)
	emit("ADDQ $8, SI")
	emit("DECQ CX")
	emit("JNZ  rs")
	emit("MOVQ scr+88(FP), BX")
	for t := 0; t < rowTiles; t++ {
		for i := 0; i < r; i++ {
			emit("VMOVUPS Z%d, %d(BX)", 4*i+t, 256*t+64*i)
		}
	}
}

// rowUpdate writes the rows' updates of their state before the outputs, the r rows' steps
// interleaved (their chains independent, in flight together): the (soft-capped) scores at
// 64·i(BX) masked (-Inf where cpos (Z19) > pos or cpos <= lo) and stored back; the new maximum,
// folded in cell order from M (VMAXSS is m > s ? m : s, NaN included, as the Go loop's
// if !(m > s) { m = s }); the rescaling factor e^(M-M') to Z24+i; the weights e^(s-M') to
// 64·i(R12); L' = L·c + the weights one by one in cell order. Zi the scores, Z4+i the maximum
// then the sum, Z8+i the old maximum, Z12+i the new.
func rowUpdate(r int) {
	loads("pos+40(FP), AX", "lo+48(FP), CX", "m+64(FP), SI", "l+72(FP), DI")
	for i := 0; i < r; i++ {
		emit("VMOVUPS %d(BX), Z%d", 64*i, i)
		emit("VPCMPD.BCST $6, %d(AX), Z19, K1", 4*i)
		emit("VPCMPD.BCST $2, %d(CX), Z19, K2", 4*i)
		emit("KORW    K1, K2, K1")
		emit("VMOVAPS Z23, K1, Z%d", i)
		emit("VMOVUPS Z%d, %d(BX)", i, 64*i)
	}
	for i := 0; i < r; i++ {
		emit("VMOVSS %d(SI), X%d", 4*i, 4+i)
	}
	for j := 0; j < 16; j++ {
		for i := 0; i < r; i++ {
			emit("VMAXSS %d(BX), X%d, X%d", 64*i+4*j, 4+i, 4+i)
		}
	}
	for i := 0; i < r; i++ {
		emit("VBROADCASTSS %d(SI), Z%d", 4*i, 8+i)
		emit("VMOVSS X%d, %d(SI)", 4+i, 4*i)
		emit("VBROADCASTSS X%d, Z%d", 4+i, 12+i)
		emit("VSUBPS Z%d, Z%d, Z%d", 12+i, 8+i, 24+i)
		emit("VSUBPS Z%d, Z%d, Z%d", 12+i, i, i)
	}
	for i := 0; i < r; i++ {
		emit("EXPZ(Z%d, Z16, Z17)", 24+i)
	}
	for i := 0; i < r; i++ {
		emit("EXPZ(Z%d, Z16, Z17)", i)
		emit("VMOVUPS Z%d, %d(R12)", i, 64*i)
	}
	for i := 0; i < r; i++ {
		emit("VMULSS %d(DI), X%d, X%d", 4*i, 24+i, 4+i)
	}
	for j := 0; j < 16; j++ {
		for i := 0; i < r; i++ {
			emit("VADDSS %d(R12), X%d, X%d", 64*i+4*j, 4+i, 4+i)
		}
	}
	for i := 0; i < r; i++ {
		emit("VMOVSS X%d, %d(DI)", 4+i, 4*i)
	}
}

// rowValueMacros writes RVJ<name>_<c> for c = 1..4: one cell of the outputs, c chunks of 16
// dimensions of the r rows: Z<16+k> = the chunks of the cell's V row (DX the cell, its row at
// cell·vstrideB from R11, widened from halves when f16), Z<4i+k> += the weight of row i
// (64·i(SI)) · Z<16+k>; DX on to the next cell, SI to the next weight.
func rowValueMacros(r int, f16 bool) {
	name := fmt.Sprintf("%dF32", r)
	if f16 {
		name = fmt.Sprintf("%dF16", r)
	}
	for c := 1; c <= 4; c++ {
		define(fmt.Sprintf("RVJ%s_%d: one cell's weights times its V row, %d rows × %d chunks of 16.", name, c, r, c),
			fmt.Sprintf("RVJ%s_%d", name, c), func() {
				emit("MOVLQSX (DX), AX")
				emit("IMULQ   vstrideB+112(FP), AX")
				for k := 0; k < c; k++ {
					if f16 {
						emit("VCVTPH2PS %d(R11)(AX*1), Z%d", 32*k, 16+k)
					} else {
						emit("VMOVUPS %d(R11)(AX*1), Z%d", 64*k, 16+k)
					}
				}
				for i := 0; i < r; i++ {
					for k := 0; k < c; k++ {
						emit("VFMADD231PS.BCST %d(SI), Z%d, Z%d", 64*i, 16+k, 4*i+k)
					}
				}
				emit("ADDQ $4, DX")
				emit("ADDQ $4, SI")
			})
	}
}

// rowValues writes the outputs of the tile: o[i][d] = o[i][d]·c_i, then += p_ij·v[j][d] for the
// cells j in order; 64 dimensions a pass, then the remaining 16, 32 or 48. R11 is v at the pass's
// dimensions.
func rowValues(r int) {
	passes := 0 // for the labels of the passes' loops
	loads("o+80(FP), DI", "v+24(FP), R11")
	emit("MOVQ hd+8(FP), R13")
	emit("SHRQ $6, R13")
	emit("JZ   rvt")
	label("rvp")
	rowPass(r, 4, &passes)
	emit("DECQ R13")
	emit("JNZ  rvp")
	label("rvt")
	emit("MOVQ hd+8(FP), R13")
	emit("SHRQ $4, R13")
	emit("ANDQ $3, R13")
	for c := 1; c <= 3; c++ {
		emit("CMPQ R13, $%d", c)
		emit("JEQ  rv%d", c)
	}
	emit("JMP  rvd")
	for c := 1; c <= 3; c++ {
		label(fmt.Sprintf("rv%d", c))
		rowPass(r, c, &passes)
		emit("JMP  rvd")
	}
	label("rvd")
}

// rowPass writes one pass of c chunks of 16 dimensions at DI (o) and R11 (v): the accumulators
// rescaled, the 16 cells (from R10, the tile's cells) by the macro parameter rvj<c>, the stores;
// DI and R11 (by c times the parameter vb) on to the next chunks.
func rowPass(r, c int, passes *int) {
	for i := 0; i < r; i++ {
		for k := 0; k < c; k++ {
			emit("VMULPS %d(DI)%s, Z%d, Z%d", 64*k, rowIndex[i], 24+i, 4*i+k)
		}
	}
	emit("MOVQ R10, DX")
	emit("MOVQ R12, SI")
	emit("MOVQ $4, CX")
	l := fmt.Sprintf("rvj%d_%d", c, *passes)
	*passes++
	label(l)
	for j := 0; j < 4; j++ {
		emit("rvj%d", c)
	}
	emit("DECQ CX")
	emit("JNZ  %s", l)
	for i := 0; i < r; i++ {
		for k := 0; k < c; k++ {
			emit("VMOVUPS Z%d, %d(DI)%s", 4*i+k, 64*k, rowIndex[i])
		}
	}
	emit("ADDQ $%d, DI", 64*c)
	emit("ADDQ $(%d*vb), R11", c)
}
