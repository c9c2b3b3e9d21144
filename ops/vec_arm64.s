#include "textflag.h"

// NEON vector kernels (declared in vec_asm.go): n > 0 is a multiple of 8; 16 elements per loop pass,
// then one pass of 8 if left. Go's assembler has no mnemonics for the vector float add, the
// pairwise adds and the f16→f32 widening (FCVTL/FCVTL2), so those are WORD encodings, each with
// the instruction it encodes in GNU syntax (as `llvm-mc -triple=aarch64 -show-encoding` prints
// it); the tests against the Go twins check them.

// F16X8 widens the 8 halves in V8 to floats in V4:V5, F16X16 the 16 in V8:V9 to V4-V7.
#define F16X8 \
	WORD	$0x0e217904 /* fcvtl  v4.4s, v8.4h */; \
	WORD	$0x4e217905 /* fcvtl2 v5.4s, v8.8h */

#define F16X16 \
	F16X8; \
	WORD	$0x0e217926 /* fcvtl  v6.4s, v9.4h */; \
	WORD	$0x4e217927 /* fcvtl2 v7.4s, v9.8h */

// FMA8 adds V0:V1 · V4:V5 to the accumulators V16:V17, FMA16 V0-V3 · V4-V7 to V16-V19.
#define FMA8 \
	VFMLA	V4.S4, V0.S4, V16.S4; \
	VFMLA	V5.S4, V1.S4, V17.S4

#define FMA16 \
	FMA8; \
	VFMLA	V6.S4, V2.S4, V18.S4; \
	VFMLA	V7.S4, V3.S4, V19.S4

// HSUM16 sets F0 to the sum of the accumulators V16-V19: ((16+18)+(17+19)), then the lanes
// pairwise.
#define HSUM16 \
	WORD	$0x4e32d610 /* fadd  v16.4s, v16.4s, v18.4s */; \
	WORD	$0x4e33d631 /* fadd  v17.4s, v17.4s, v19.4s */; \
	WORD	$0x4e31d610 /* fadd  v16.4s, v16.4s, v17.4s */; \
	WORD	$0x6e30d610 /* faddp v16.4s, v16.4s, v16.4s */; \
	WORD	$0x7e30da00 /* faddp s0, v16.2s */

#define ZERO16 \
	VEOR	V16.B16, V16.B16, V16.B16; \
	VEOR	V17.B16, V17.B16, V17.B16; \
	VEOR	V18.B16, V18.B16, V18.B16; \
	VEOR	V19.B16, V19.B16, V19.B16

// BLOCKS runs BODY16(LOAD16) for each 16 of the n (R0) elements, then BODY8(LOAD8) for the 8
// left if any. LOAD16 (LOAD8) loads 16 (8) elements at a register as floats into V4-V7 (V4:V5):
// float32 (LOADF32X16, LOADF32X8) or halves (LOADF16X16, LOADF16X8); the X16 ones advance it.
#define BLOCKS(BODY16, BODY8, LOAD16, LOAD8) \
	CMP	$16, R0; \
	BLT	tail; \
loop: \
	BODY16(LOAD16); \
	SUB	$16, R0; \
	CMP	$16, R0; \
	BGE	loop; \
tail: \
	CBZ	R0, done; \
	BODY8(LOAD8); \
done:

#define LOADF32X16(r) VLD1.P 64(r), [V4.S4, V5.S4, V6.S4, V7.S4]
#define LOADF32X8(r) VLD1 (r), [V4.S4, V5.S4]
#define LOADF16X16(r) VLD1.P 32(r), [V8.H8, V9.H8]; F16X16
#define LOADF16X8(r) VLD1 (r), [V8.H8]; F16X8

// The dot bodies: x (R1, float32) times y (R2, loaded by LOAD) into V16-V19.
#define DOT16(LOAD) \
	VLD1.P	64(R1), [V0.S4, V1.S4, V2.S4, V3.S4]; \
	LOAD(R2); \
	FMA16

#define DOT8(LOAD) \
	VLD1	(R1), [V0.S4, V1.S4]; \
	LOAD(R2); \
	FMA8

// The axpy bodies: y (R2, float32) += a (V10) · x (R1, loaded by LOAD).
#define AXPY16(LOAD) \
	LOAD(R1); \
	VLD1	(R2), [V16.S4, V17.S4, V18.S4, V19.S4]; \
	VFMLA	V10.S4, V4.S4, V16.S4; \
	VFMLA	V10.S4, V5.S4, V17.S4; \
	VFMLA	V10.S4, V6.S4, V18.S4; \
	VFMLA	V10.S4, V7.S4, V19.S4; \
	VST1.P	[V16.S4, V17.S4, V18.S4, V19.S4], 64(R2)

#define AXPY8(LOAD) \
	LOAD(R1); \
	VLD1	(R2), [V16.S4, V17.S4]; \
	VFMLA	V10.S4, V4.S4, V16.S4; \
	VFMLA	V10.S4, V5.S4, V17.S4; \
	VST1	[V16.S4, V17.S4], (R2)

// The conversion bodies: dst (R2) = src (R1, loaded by LOAD).
#define CVT16(LOAD) \
	LOAD(R1); \
	VST1.P	[V4.S4, V5.S4, V6.S4, V7.S4], 64(R2)

#define CVT8(LOAD) \
	LOAD(R1); \
	VST1	[V4.S4, V5.S4], (R2)

// DOTFUNC is func name(n int, x *float32, y *float32 or *uint16) float32, with y loaded by
// LOAD16 and LOAD8.
#define DOTFUNC(name, LOAD16, LOAD8) \
TEXT name(SB), NOSPLIT, $0-28; \
	MOVD	n+0(FP), R0; \
	MOVD	x+8(FP), R1; \
	MOVD	y+16(FP), R2; \
	ZERO16; \
	BLOCKS(DOT16, DOT8, LOAD16, LOAD8); \
	HSUM16; \
	FMOVS	F0, ret+24(FP); \
	RET

// AXPYFUNC is func name(n int, a float32, x *float32 or *uint16, y *float32), with x loaded by
// LOAD16 and LOAD8.
#define AXPYFUNC(name, LOAD16, LOAD8) \
TEXT name(SB), NOSPLIT, $0-32; \
	MOVD	n+0(FP), R0; \
	FMOVS	a+8(FP), F10; \
	MOVD	x+16(FP), R1; \
	MOVD	y+24(FP), R2; \
	VDUP	V10.S[0], V10.S4; \
	BLOCKS(AXPY16, AXPY8, LOAD16, LOAD8); \
	RET

DOTFUNC(·dotF32Asm, LOADF32X16, LOADF32X8)
DOTFUNC(·dotF16Asm, LOADF16X16, LOADF16X8)
AXPYFUNC(·axpyF32Asm, LOADF32X16, LOADF32X8)
AXPYFUNC(·axpyF16Asm, LOADF16X16, LOADF16X8)

// func cvtF16NEON(n int, src *uint16, dst *float32)
TEXT ·cvtF16NEON(SB), NOSPLIT, $0-24
	MOVD	n+0(FP), R0
	MOVD	src+8(FP), R1
	MOVD	dst+16(FP), R2
	BLOCKS(CVT16, CVT8, LOADF16X16, LOADF16X8)
	RET
