#include "textflag.h"

// AVX2/FMA/F16C vector kernels for attention (declared in vec_asm.go). n > 0 is a multiple of 8. The
// dots keep four accumulators over 32 elements per iteration, then take 8 at a time.

// HSUM0 leaves the sum of the 8 floats of Y0 in X0.
#define HSUM0 \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0; \
	VMOVHLPS     X0, X0, X1; \
	VADDPS       X1, X0, X0; \
	VMOVSHDUP    X0, X1;     \
	VADDSS       X1, X0, X0

// func dotF32Asm(n int, x, y *float32) float32
TEXT ·dotF32Asm(SB), NOSPLIT, $0-28
	MOVQ   n+0(FP), CX
	MOVQ   x+8(FP), SI
	MOVQ   y+16(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ   CX, $32
	JLT    d32tail

d32loop:
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	CMPQ        CX, $32
	JGE         d32loop

d32tail:
	TESTQ CX, CX
	JZ    d32done

d32loop8:
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JNZ         d32loop8

d32done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotF16Asm(n int, x *float32, y *uint16) float32
TEXT ·dotF16Asm(SB), NOSPLIT, $0-28
	MOVQ   n+0(FP), CX
	MOVQ   x+8(FP), SI
	MOVQ   y+16(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ   CX, $32
	JLT    d16tail

d16loop:
	VCVTPH2PS   (DI), Y4
	VCVTPH2PS   16(DI), Y5
	VCVTPH2PS   32(DI), Y6
	VCVTPH2PS   48(DI), Y7
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	VFMADD231PS 64(SI), Y6, Y2
	VFMADD231PS 96(SI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $64, DI
	SUBQ        $32, CX
	CMPQ        CX, $32
	JGE         d16loop

d16tail:
	TESTQ CX, CX
	JZ    d16done

d16loop8:
	VCVTPH2PS   (DI), Y4
	VFMADD231PS (SI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $16, DI
	SUBQ        $8, CX
	JNZ         d16loop8

d16done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpyF32Asm(n int, a float32, x, y *float32)
TEXT ·axpyF32Asm(SB), NOSPLIT, $0-32
	MOVQ         n+0(FP), CX
	VBROADCASTSS a+8(FP), Y15
	MOVQ         x+16(FP), SI
	MOVQ         y+24(FP), DI
	CMPQ         CX, $32
	JLT          a32tail

a32loop:
	VMOVUPS     (DI), Y0
	VMOVUPS     32(DI), Y1
	VMOVUPS     64(DI), Y2
	VMOVUPS     96(DI), Y3
	VFMADD231PS (SI), Y15, Y0
	VFMADD231PS 32(SI), Y15, Y1
	VFMADD231PS 64(SI), Y15, Y2
	VFMADD231PS 96(SI), Y15, Y3
	VMOVUPS     Y0, (DI)
	VMOVUPS     Y1, 32(DI)
	VMOVUPS     Y2, 64(DI)
	VMOVUPS     Y3, 96(DI)
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	CMPQ        CX, $32
	JGE         a32loop

a32tail:
	TESTQ CX, CX
	JZ    a32done

a32loop8:
	VMOVUPS     (DI), Y0
	VFMADD231PS (SI), Y15, Y0
	VMOVUPS     Y0, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JNZ         a32loop8

a32done:
	VZEROUPPER
	RET

// func axpyF16Asm(n int, a float32, x *uint16, y *float32)
TEXT ·axpyF16Asm(SB), NOSPLIT, $0-32
	MOVQ         n+0(FP), CX
	VBROADCASTSS a+8(FP), Y15
	MOVQ         x+16(FP), SI
	MOVQ         y+24(FP), DI
	CMPQ         CX, $32
	JLT          a16tail

a16loop:
	VCVTPH2PS   (SI), Y4
	VCVTPH2PS   16(SI), Y5
	VCVTPH2PS   32(SI), Y6
	VCVTPH2PS   48(SI), Y7
	VMOVUPS     (DI), Y0
	VMOVUPS     32(DI), Y1
	VMOVUPS     64(DI), Y2
	VMOVUPS     96(DI), Y3
	VFMADD231PS Y4, Y15, Y0
	VFMADD231PS Y5, Y15, Y1
	VFMADD231PS Y6, Y15, Y2
	VFMADD231PS Y7, Y15, Y3
	VMOVUPS     Y0, (DI)
	VMOVUPS     Y1, 32(DI)
	VMOVUPS     Y2, 64(DI)
	VMOVUPS     Y3, 96(DI)
	ADDQ        $64, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	CMPQ        CX, $32
	JGE         a16loop

a16tail:
	TESTQ CX, CX
	JZ    a16done

a16loop8:
	VCVTPH2PS   (SI), Y4
	VMOVUPS     (DI), Y0
	VFMADD231PS Y4, Y15, Y0
	VMOVUPS     Y0, (DI)
	ADDQ        $16, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JNZ         a16loop8

a16done:
	VZEROUPPER
	RET
