#include "textflag.h"

// deltaRowAsm(n int, s, k, q *float32, decay, v, beta float32) float32: one row of the gated
// delta rule (DeltaRuleStep) with AVX2/FMA; n > 0 a multiple of 8. Pass 1 decays the row and
// dots it with k; pass 2 adds δ·k (δ = beta·(v − dot)) and dots the new row with q.
TEXT ·deltaRowAsm(SB), NOSPLIT, $0-52
	MOVQ         n+0(FP), CX
	MOVQ         s+8(FP), SI
	MOVQ         k+16(FP), DI
	MOVQ         q+24(FP), DX
	VBROADCASTSS decay+32(FP), Y14
	VXORPS       Y0, Y0, Y0
	MOVQ         CX, BX
	MOVQ         SI, R8
	MOVQ         DI, R9

decay:
	VMULPS      (R8), Y14, Y1
	VMOVUPS     Y1, (R8)
	VFMADD231PS (R9), Y1, Y0
	ADDQ        $32, R8
	ADDQ        $32, R9
	SUBQ        $8, BX
	JNZ         decay

	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VMOVSS       v+36(FP), X2
	VSUBSS       X0, X2, X2
	VMULSS       beta+40(FP), X2, X2
	VBROADCASTSS X2, Y13
	VXORPS       Y0, Y0, Y0

write:
	VMOVUPS     (SI), Y1
	VFMADD231PS (DI), Y13, Y1
	VMOVUPS     Y1, (SI)
	VFMADD231PS (DX), Y1, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, DX
	SUBQ        $8, CX
	JNZ         write

	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VZEROUPPER
	MOVSS        X0, ret+48(FP)
	RET
