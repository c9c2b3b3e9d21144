#include "textflag.h"
#include "vec_amd64.h"

// AVX2/FMA/F16C vector kernels for attention (declared in vec_asm.go). n > 0 is a multiple of 8. The
// dots keep four accumulators over 32 elements per iteration, then take 8 at a time.

// DOTARGS(tail): n in CX, x in SI, y in DI, the accumulators Y0-Y3 zeroed; to tail with fewer
// than 32 elements.
#define DOTARGS(tail) \
	MOVQ   n+0(FP), CX;  \
	MOVQ   x+8(FP), SI;  \
	MOVQ   y+16(FP), DI; \
	VXORPS Y0, Y0, Y0;   \
	VXORPS Y1, Y1, Y1;   \
	VXORPS Y2, Y2, Y2;   \
	VXORPS Y3, Y3, Y3;   \
	CMPQ   CX, $32;      \
	JLT    tail

// AXPYARGS(tail): n in CX, a in all of Y15, x in SI, y in DI; to tail with fewer than 32 elements.
#define AXPYARGS(tail) \
	MOVQ         n+0(FP), CX;  \
	VBROADCASTSS a+8(FP), Y15; \
	MOVQ         x+16(FP), SI; \
	MOVQ         y+24(FP), DI; \
	CMPQ         CX, $32;      \
	JLT          tail

// LOAD4(OP, p, o1, o2, o3, r0, r1, r2, r3): r0-r3 = OP of (p), o1(p), o2(p), o3(p).
#define LOAD4(OP, p, o1, o2, o3, r0, r1, r2, r3) \
	OP (p), r0;   \
	OP o1(p), r1; \
	OP o2(p), r2; \
	OP o3(p), r3

// FMA4(a, b, c, d, m): Y0-Y3 += a-d · m, for the axpys (a-d registers or memory).
#define FMA4(a, b, c, d, m) \
	VFMADD231PS a, m, Y0; \
	VFMADD231PS b, m, Y1; \
	VFMADD231PS c, m, Y2; \
	VFMADD231PS d, m, Y3

// DOTFMA4(p): the dots' Y0-Y3 += Y4-Y7 · the 32 floats at p.
#define DOTFMA4(p) \
	VFMADD231PS (p), Y4, Y0;   \
	VFMADD231PS 32(p), Y5, Y1; \
	VFMADD231PS 64(p), Y6, Y2; \
	VFMADD231PS 96(p), Y7, Y3

// NEXT32(xb, yb, loop): x and y on by 32 elements (xb and yb bytes); to loop while 32 are left.
#define NEXT32(xb, yb, loop) \
	ADDQ $xb, SI; \
	ADDQ $yb, DI; \
	COUNT(32, loop)

// NEXT8(xb, yb, loop): x and y on by 8 elements (xb and yb bytes); to loop while any are left.
#define NEXT8(xb, yb, loop) \
	ADDQ $xb, SI; \
	ADDQ $yb, DI; \
	SUBQ $8, CX;  \
	JNZ  loop

// DOTSUM: the sum of Y0-Y3 in X0.
#define DOTSUM \
	FOLD4(VADDPS); \
	HFOLD(VADDPS, VADDSS)

// func dotF32Asm(n int, x, y *float32) float32
TEXT ·dotF32Asm(SB), NOSPLIT, $0-28
	DOTARGS(d32tail)

d32loop:
	LOAD4(VMOVUPS, SI, 32, 64, 96, Y4, Y5, Y6, Y7)
	DOTFMA4(DI)
	NEXT32(128, 128, d32loop)

d32tail:
	TAIL(d32done)

d32loop8:
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	NEXT8(32, 32, d32loop8)

d32done:
	DOTSUM
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dotF16Asm(n int, x *float32, y *uint16) float32
TEXT ·dotF16Asm(SB), NOSPLIT, $0-28
	DOTARGS(d16tail)

d16loop:
	LOAD4(VCVTPH2PS, DI, 16, 32, 48, Y4, Y5, Y6, Y7)
	DOTFMA4(SI)
	NEXT32(128, 64, d16loop)

d16tail:
	TAIL(d16done)

d16loop8:
	VCVTPH2PS   (DI), Y4
	VFMADD231PS (SI), Y4, Y0
	NEXT8(32, 16, d16loop8)

d16done:
	DOTSUM
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpyF32Asm(n int, a float32, x, y *float32)
TEXT ·axpyF32Asm(SB), NOSPLIT, $0-32
	AXPYARGS(a32tail)

a32loop:
	LOAD4(VMOVUPS, DI, 32, 64, 96, Y0, Y1, Y2, Y3)
	FMA4((SI), 32(SI), 64(SI), 96(SI), Y15)
	STORE4(DI)
	NEXT32(128, 128, a32loop)

a32tail:
	TAIL(a32done)

a32loop8:
	VMOVUPS     (DI), Y0
	VFMADD231PS (SI), Y15, Y0
	VMOVUPS     Y0, (DI)
	NEXT8(32, 32, a32loop8)

a32done:
	VZEROUPPER
	RET

// func axpyF16Asm(n int, a float32, x *uint16, y *float32)
TEXT ·axpyF16Asm(SB), NOSPLIT, $0-32
	AXPYARGS(a16tail)

a16loop:
	LOAD4(VCVTPH2PS, SI, 16, 32, 48, Y4, Y5, Y6, Y7)
	LOAD4(VMOVUPS, DI, 32, 64, 96, Y0, Y1, Y2, Y3)
	FMA4(Y4, Y5, Y6, Y7, Y15)
	STORE4(DI)
	NEXT32(64, 128, a16loop)

a16tail:
	TAIL(a16done)

a16loop8:
	VCVTPH2PS   (SI), Y4
	VMOVUPS     (DI), Y0
	VFMADD231PS Y4, Y15, Y0
	VMOVUPS     Y0, (DI)
	NEXT8(16, 32, a16loop8)

a16done:
	VZEROUPPER
	RET
