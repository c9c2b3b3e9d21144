#include "textflag.h"

// NEON vector kernels (declared in vec_asm.go): n > 0 is a multiple of 8; 16 elements per loop pass,
// then one pass of 8 if left. Go's assembler has no mnemonics for the vector float add, the
// pairwise adds and the f16→f32 widening (FCVTL/FCVTL2), so those are WORD encodings, each with
// the instruction it encodes in GNU syntax (as `llvm-mc -triple=aarch64 -show-encoding` prints
// it); the tests against the Go twins check them.

// F16X16 widens the 16 halves in V8:V9 to floats in V4-V7.
#define F16X16 \
	WORD	$0x0e217904 /* fcvtl  v4.4s, v8.4h */; \
	WORD	$0x4e217905 /* fcvtl2 v5.4s, v8.8h */; \
	WORD	$0x0e217926 /* fcvtl  v6.4s, v9.4h */; \
	WORD	$0x4e217927 /* fcvtl2 v7.4s, v9.8h */

// FMA16 adds V0-V3 · V4-V7 to the accumulators V16-V19.
#define FMA16 \
	VFMLA	V4.S4, V0.S4, V16.S4; \
	VFMLA	V5.S4, V1.S4, V17.S4; \
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

// func dotF32Asm(n int, x, y *float32) float32
TEXT ·dotF32Asm(SB), NOSPLIT, $0-28
	MOVD	n+0(FP), R0
	MOVD	x+8(FP), R1
	MOVD	y+16(FP), R2
	ZERO16
	CMP	$16, R0
	BLT	dot32tail
dot32loop:
	VLD1.P	64(R1), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P	64(R2), [V4.S4, V5.S4, V6.S4, V7.S4]
	FMA16
	SUB	$16, R0
	CMP	$16, R0
	BGE	dot32loop
dot32tail:
	CBZ	R0, dot32done
	VLD1	(R1), [V0.S4, V1.S4]
	VLD1	(R2), [V4.S4, V5.S4]
	VFMLA	V4.S4, V0.S4, V16.S4
	VFMLA	V5.S4, V1.S4, V17.S4
dot32done:
	HSUM16
	FMOVS	F0, ret+24(FP)
	RET

// func dotF16Asm(n int, x *float32, y *uint16) float32
TEXT ·dotF16Asm(SB), NOSPLIT, $0-28
	MOVD	n+0(FP), R0
	MOVD	x+8(FP), R1
	MOVD	y+16(FP), R2
	ZERO16
	CMP	$16, R0
	BLT	dot16tail
dot16loop:
	VLD1.P	64(R1), [V0.S4, V1.S4, V2.S4, V3.S4]
	VLD1.P	32(R2), [V8.H8, V9.H8]
	F16X16
	FMA16
	SUB	$16, R0
	CMP	$16, R0
	BGE	dot16loop
dot16tail:
	CBZ	R0, dot16done
	VLD1	(R1), [V0.S4, V1.S4]
	VLD1	(R2), [V8.H8]
	WORD	$0x0e217904 // fcvtl  v4.4s, v8.4h
	WORD	$0x4e217905 // fcvtl2 v5.4s, v8.8h
	VFMLA	V4.S4, V0.S4, V16.S4
	VFMLA	V5.S4, V1.S4, V17.S4
dot16done:
	HSUM16
	FMOVS	F0, ret+24(FP)
	RET

// func axpyF32Asm(n int, a float32, x, y *float32)
TEXT ·axpyF32Asm(SB), NOSPLIT, $0-32
	MOVD	n+0(FP), R0
	FMOVS	a+8(FP), F10
	MOVD	x+16(FP), R1
	MOVD	y+24(FP), R2
	VDUP	V10.S[0], V10.S4
	CMP	$16, R0
	BLT	axpy32tail
axpy32loop:
	VLD1.P	64(R1), [V4.S4, V5.S4, V6.S4, V7.S4]
	VLD1	(R2), [V16.S4, V17.S4, V18.S4, V19.S4]
	VFMLA	V10.S4, V4.S4, V16.S4
	VFMLA	V10.S4, V5.S4, V17.S4
	VFMLA	V10.S4, V6.S4, V18.S4
	VFMLA	V10.S4, V7.S4, V19.S4
	VST1.P	[V16.S4, V17.S4, V18.S4, V19.S4], 64(R2)
	SUB	$16, R0
	CMP	$16, R0
	BGE	axpy32loop
axpy32tail:
	CBZ	R0, axpy32done
	VLD1	(R1), [V4.S4, V5.S4]
	VLD1	(R2), [V16.S4, V17.S4]
	VFMLA	V10.S4, V4.S4, V16.S4
	VFMLA	V10.S4, V5.S4, V17.S4
	VST1	[V16.S4, V17.S4], (R2)
axpy32done:
	RET

// func axpyF16Asm(n int, a float32, x *uint16, y *float32)
TEXT ·axpyF16Asm(SB), NOSPLIT, $0-32
	MOVD	n+0(FP), R0
	FMOVS	a+8(FP), F10
	MOVD	x+16(FP), R1
	MOVD	y+24(FP), R2
	VDUP	V10.S[0], V10.S4
	CMP	$16, R0
	BLT	axpy16tail
axpy16loop:
	VLD1.P	32(R1), [V8.H8, V9.H8]
	F16X16
	VLD1	(R2), [V16.S4, V17.S4, V18.S4, V19.S4]
	VFMLA	V10.S4, V4.S4, V16.S4
	VFMLA	V10.S4, V5.S4, V17.S4
	VFMLA	V10.S4, V6.S4, V18.S4
	VFMLA	V10.S4, V7.S4, V19.S4
	VST1.P	[V16.S4, V17.S4, V18.S4, V19.S4], 64(R2)
	SUB	$16, R0
	CMP	$16, R0
	BGE	axpy16loop
axpy16tail:
	CBZ	R0, axpy16done
	VLD1	(R1), [V8.H8]
	WORD	$0x0e217904 // fcvtl  v4.4s, v8.4h
	WORD	$0x4e217905 // fcvtl2 v5.4s, v8.8h
	VLD1	(R2), [V16.S4, V17.S4]
	VFMLA	V10.S4, V4.S4, V16.S4
	VFMLA	V10.S4, V5.S4, V17.S4
	VST1	[V16.S4, V17.S4], (R2)
axpy16done:
	RET

// func cvtF16NEON(n int, src *uint16, dst *float32)
TEXT ·cvtF16NEON(SB), NOSPLIT, $0-24
	MOVD	n+0(FP), R0
	MOVD	src+8(FP), R1
	MOVD	dst+16(FP), R2
	CMP	$16, R0
	BLT	cvttail
cvtloop:
	VLD1.P	32(R1), [V8.H8, V9.H8]
	F16X16
	VST1.P	[V4.S4, V5.S4, V6.S4, V7.S4], 64(R2)
	SUB	$16, R0
	CMP	$16, R0
	BGE	cvtloop
cvttail:
	CBZ	R0, cvtdone
	VLD1	(R1), [V8.H8]
	WORD	$0x0e217904 // fcvtl  v4.4s, v8.4h
	WORD	$0x4e217905 // fcvtl2 v5.4s, v8.8h
	VST1	[V4.S4, V5.S4], (R2)
cvtdone:
	RET
