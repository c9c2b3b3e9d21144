#include "textflag.h"
#include "simd_amd64.h"

// F32, F16 and BF16 weights dotted with F32 activations, AVX2 + FMA (+ F16C for F16); see
// dot_f_amd64.go.
//
// func dotF32AVX2Asm(n int, w, x *byte, xStride, nx int, out *float32)   (and F16, BF16)
//
// n > 0 is a multiple of 8; 1 <= nx <= 4. Registers: SI weights, DI column 0's activations
// (column j at DI + j*R8), R9 = 3*R8, BX elements left, DX out; Y0/Y1 decoded weights 0-7/8-15 of
// each group of 16; Y8-Y11 and Y12-Y15 the two accumulators of columns 0-3 (even and odd groups of
// 8 elements); Y6/Y7 scratch.

// Weight decoders: LD16_T fills Y0 and Y1 with 16 weights at SI, LD8_T fills Y0 with 8.
#define LD16_F32 \
	VMOVUPS (SI), Y0; \
	VMOVUPS 32(SI), Y1

#define LD8_F32 \
	VMOVUPS (SI), Y0

#define LD16_F16 \
	VCVTPH2PS (SI), Y0; \
	VCVTPH2PS 16(SI), Y1

#define LD8_F16 \
	VCVTPH2PS (SI), Y0

// A bfloat16 is the top half of a float32.
#define LD16_BF16 \
	VPMOVZXWD (SI), Y0;   \
	VPSLLD    $16, Y0, Y0; \
	VPMOVZXWD 16(SI), Y1; \
	VPSLLD    $16, Y1, Y1

#define LD8_BF16 \
	VPMOVZXWD (SI), Y0; \
	VPSLLD    $16, Y0, Y0

// C16_n / C8_n accumulate columns 0..n-1 over 16 / 8 elements.
#define C16_1 \
	VFMADD231PS (DI), Y0, Y8; \
	VFMADD231PS 32(DI), Y1, Y12

#define C16_2 \
	C16_1; \
	VFMADD231PS (DI)(R8*1), Y0, Y9; \
	VFMADD231PS 32(DI)(R8*1), Y1, Y13

#define C16_3 \
	C16_2; \
	VFMADD231PS (DI)(R8*2), Y0, Y10; \
	VFMADD231PS 32(DI)(R8*2), Y1, Y14

#define C16_4 \
	C16_3; \
	VFMADD231PS (DI)(R9*1), Y0, Y11; \
	VFMADD231PS 32(DI)(R9*1), Y1, Y15

#define C8_1 \
	VFMADD231PS (DI), Y0, Y8

#define C8_2 \
	C8_1; \
	VFMADD231PS (DI)(R8*1), Y0, Y9

#define C8_3 \
	C8_2; \
	VFMADD231PS (DI)(R8*2), Y0, Y10

#define C8_4 \
	C8_3; \
	VFMADD231PS (DI)(R9*1), Y0, Y11

#define FIN_1 \
	VADDPS Y12, Y8, Y8; \
	HSUM(Y8, X8, (DX), X7, X6)

#define FIN_2 \
	FIN_1; \
	VADDPS Y13, Y9, Y9; \
	HSUM(Y9, X9, 4(DX), X7, X6)

#define FIN_3 \
	FIN_2; \
	VADDPS Y14, Y10, Y10; \
	HSUM(Y10, X10, 8(DX), X7, X6)

#define FIN_4 \
	FIN_3; \
	VADDPS Y15, Y11, Y11; \
	HSUM(Y11, X11, 12(DX), X7, X6)

#define PROLOGUE \
	MOVQ  n+0(FP), BX;          \
	ROW_ARGS;                   \
	LEAQ  (R8)(R8*2), R9;       \
	CLEAR4(VXORPS, Y8, Y9, Y10, Y11); \
	CLEAR4(VXORPS, Y12, Y13, Y14, Y15)

// STEP16 advances by 16 elements (wb weight bytes) and loops to label while 16 remain.
#define STEP16(wb, label) \
	ADDQ $wb, SI;  \
	ADDQ $64, DI;  \
	SUBQ $16, BX;  \
	CMPQ BX, $16;  \
	JGE  label
TEXT ·dotF32AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	CMPQ R11, $4
	JEQ  f32x4
	CMPQ R11, $3
	JEQ  f32x3
	CMPQ R11, $2
	JEQ  f32x2

f32x1:
	CMPQ BX, $16
	JLT  f32x1t

f32x1l:
	LD16_F32
	C16_1
	STEP16(64, f32x1l)

f32x1t:
	TESTQ BX, BX
	JZ    f32x1d
	LD8_F32
	C8_1

f32x1d:
	FIN_1
	VZEROUPPER
	RET

f32x2:
	CMPQ BX, $16
	JLT  f32x2t

f32x2l:
	LD16_F32
	C16_2
	STEP16(64, f32x2l)

f32x2t:
	TESTQ BX, BX
	JZ    f32x2d
	LD8_F32
	C8_2

f32x2d:
	FIN_2
	VZEROUPPER
	RET

f32x3:
	CMPQ BX, $16
	JLT  f32x3t

f32x3l:
	LD16_F32
	C16_3
	STEP16(64, f32x3l)

f32x3t:
	TESTQ BX, BX
	JZ    f32x3d
	LD8_F32
	C8_3

f32x3d:
	FIN_3
	VZEROUPPER
	RET

f32x4:
	CMPQ BX, $16
	JLT  f32x4t

f32x4l:
	LD16_F32
	C16_4
	STEP16(64, f32x4l)

f32x4t:
	TESTQ BX, BX
	JZ    f32x4d
	LD8_F32
	C8_4

f32x4d:
	FIN_4
	VZEROUPPER
	RET

TEXT ·dotF16AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	CMPQ R11, $4
	JEQ  f16x4
	CMPQ R11, $3
	JEQ  f16x3
	CMPQ R11, $2
	JEQ  f16x2

f16x1:
	CMPQ BX, $16
	JLT  f16x1t

f16x1l:
	LD16_F16
	C16_1
	STEP16(32, f16x1l)

f16x1t:
	TESTQ BX, BX
	JZ    f16x1d
	LD8_F16
	C8_1

f16x1d:
	FIN_1
	VZEROUPPER
	RET

f16x2:
	CMPQ BX, $16
	JLT  f16x2t

f16x2l:
	LD16_F16
	C16_2
	STEP16(32, f16x2l)

f16x2t:
	TESTQ BX, BX
	JZ    f16x2d
	LD8_F16
	C8_2

f16x2d:
	FIN_2
	VZEROUPPER
	RET

f16x3:
	CMPQ BX, $16
	JLT  f16x3t

f16x3l:
	LD16_F16
	C16_3
	STEP16(32, f16x3l)

f16x3t:
	TESTQ BX, BX
	JZ    f16x3d
	LD8_F16
	C8_3

f16x3d:
	FIN_3
	VZEROUPPER
	RET

f16x4:
	CMPQ BX, $16
	JLT  f16x4t

f16x4l:
	LD16_F16
	C16_4
	STEP16(32, f16x4l)

f16x4t:
	TESTQ BX, BX
	JZ    f16x4d
	LD8_F16
	C8_4

f16x4d:
	FIN_4
	VZEROUPPER
	RET

TEXT ·dotBF16AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	CMPQ R11, $4
	JEQ  bf16x4
	CMPQ R11, $3
	JEQ  bf16x3
	CMPQ R11, $2
	JEQ  bf16x2

bf16x1:
	CMPQ BX, $16
	JLT  bf16x1t

bf16x1l:
	LD16_BF16
	C16_1
	STEP16(32, bf16x1l)

bf16x1t:
	TESTQ BX, BX
	JZ    bf16x1d
	LD8_BF16
	C8_1

bf16x1d:
	FIN_1
	VZEROUPPER
	RET

bf16x2:
	CMPQ BX, $16
	JLT  bf16x2t

bf16x2l:
	LD16_BF16
	C16_2
	STEP16(32, bf16x2l)

bf16x2t:
	TESTQ BX, BX
	JZ    bf16x2d
	LD8_BF16
	C8_2

bf16x2d:
	FIN_2
	VZEROUPPER
	RET

bf16x3:
	CMPQ BX, $16
	JLT  bf16x3t

bf16x3l:
	LD16_BF16
	C16_3
	STEP16(32, bf16x3l)

bf16x3t:
	TESTQ BX, BX
	JZ    bf16x3d
	LD8_BF16
	C8_3

bf16x3d:
	FIN_3
	VZEROUPPER
	RET

bf16x4:
	CMPQ BX, $16
	JLT  bf16x4t

bf16x4l:
	LD16_BF16
	C16_4
	STEP16(32, bf16x4l)

bf16x4t:
	TESTQ BX, BX
	JZ    bf16x4d
	LD8_BF16
	C8_4

bf16x4d:
	FIN_4
	VZEROUPPER
	RET
