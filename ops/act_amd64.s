#include "textflag.h"
#include "vec_amd64.h"

// AVX2/FMA kernels for the activations SwiGLU and softmax (see act_amd64.go). n > 0 is a multiple
// of 8; the main loops take 16 elements per iteration (two independent exponentials), then one
// block of 8.
//
// Exponential (EXPV below), for x <= 0, 8 lanes at a time:
//   - x = k·ln2 + r with k = round(x·log2e) and |r| <= ln2/2. The rounding adds 1.5·2^23
//     (MAGIC), which leaves k in the low mantissa bits; ln2 is split so that k·LN2HI is exact
//     (LN2HI has 15 significant bits and |k| <= 87), which makes x - k·LN2HI exact as well.
//   - e^r = 1 + r + r²·(C2 + C3·r + C4·r² + C5·r³ + C6·r⁴). The coefficients are a weighted
//     least-squares fit of the relative error on [-ln2/2, ln2/2] (Lawson iterations towards
//     minimax), rounded to float32: relative truncation error 3.7e-9, so the float32 rounding
//     of the evaluation dominates.
//   - 2^k: (k + MAGIC's bits) << 23 drops MAGIC's bits and leaves k in the exponent field, so an
//     integer add scales e^r. k >= -87 keeps the result normal, and EXPV flushes lanes with
//     x < CUTOFF (-60, ExpNeg's expCutoff, so the kernels flush exactly where the Go twins do)
//     to +0, including -Inf and the garbage that far-out lanes compute.

// Constants, each repeated over 32 bytes so that it can be a memory operand of a YMM instruction.
#define LOG2E 0
#define MAGIC 32
#define LN2HI 64
#define LN2LO 96
#define C6 128
#define C5 160
#define C4 192
#define C3 224
#define C2 256
#define ONE 288
#define CUTOFF 320
#define SIGN 352

// CONST32(off, bits): the 8 bytes bits four times, from byte off of actc.
#define CONST32(off, bits) \
	DATA actc<>+(off)(SB)/8, $bits;    \
	DATA actc<>+(off+8)(SB)/8, $bits;  \
	DATA actc<>+(off+16)(SB)/8, $bits; \
	DATA actc<>+(off+24)(SB)/8, $bits

CONST32(LOG2E, 0x3fb8aa3b3fb8aa3b) // log2(e)
CONST32(MAGIC, 0x4b4000004b400000) // 1.5·2^23
CONST32(LN2HI, 0x3f3172003f317200) // 0.693145751953125, ln2 to 15 bits
CONST32(LN2LO, 0x35bfbe8e35bfbe8e) // 1.428606765e-06, ln2 - LN2HI
CONST32(C6, 0x3ab512023ab51202) // 0.00138145708
CONST32(C5, 0x3c091d003c091d00) // 0.00836873055
CONST32(C4, 0x3d2aac793d2aac79) // 0.041668389
CONST32(C3, 0x3e2aaa493e2aaa49) // 0.166665211
CONST32(C2, 0x3efffffe3efffffe) // 0.49999994
CONST32(ONE, 0x3f8000003f800000) // 1
CONST32(CUTOFF, 0xc2700000c2700000) // -60
CONST32(SIGN, 0x8000000080000000) // sign bit
GLOBL actc<>(SB), RODATA|NOPTR, $384

// EXPV sets R = e^X (0 where X < CUTOFF or X is NaN) and overwrites X, T and M. It expects
// Y15 = MAGIC, Y14 = LN2HI, Y13 = LN2LO, Y12 = ONE. In order: T = x·log2e + MAGIC (k in the low
// mantissa bits), R = k, M = all ones where x >= CUTOFF (predicate GE_OQ), X = r =
// x - k·LN2HI - k·LN2LO, R = e^r by Horner's rule, T = k << 23, R = e^r·2^k by an integer add,
// and the mask.
#define EXPV(X, T, R, M) \
	VMOVUPS      actc<>+LOG2E(SB), T;                \
	VFMADD213PS  Y15, X, T;                          \
	VSUBPS       Y15, T, R;                          \
	VCMPPS       $0x1d, actc<>+CUTOFF(SB), X, M;     \
	VFNMADD231PS Y14, R, X;                          \
	VFNMADD231PS Y13, R, X;                          \
	VMOVUPS      actc<>+C6(SB), R;                   \
	VFMADD213PS  actc<>+C5(SB), X, R;                \
	VFMADD213PS  actc<>+C4(SB), X, R;                \
	VFMADD213PS  actc<>+C3(SB), X, R;                \
	VFMADD213PS  actc<>+C2(SB), X, R;                \
	VFMADD213PS  Y12, X, R;                          \
	VFMADD213PS  Y12, X, R;                          \
	VPSLLD       $23, T, T;                          \
	VPADDD       T, R, R;                            \
	VANDPS       M, R, R

#define EXPCONSTS \
	VBROADCASTSS actc<>+MAGIC(SB), Y15; \
	VBROADCASTSS actc<>+LN2HI(SB), Y14; \
	VBROADCASTSS actc<>+LN2LO(SB), Y13; \
	VBROADCASTSS actc<>+ONE(SB), Y12

// SILU turns E = e^-|G| into G·sigmoid(G) (in G), overwriting E and D: sigmoid is 1/(1+E) for
// G >= 0 and E/(1+E) for G < 0 (chosen by G's sign bit, so -0 counts as negative, which gives the
// same 1/2). In order: D = 1 + E, E = G's sign ? E : 1, E = E / D, G = G·E. Multiplying by G
// before up keeps the result finite (±0 where E flushed to 0), as in the Go twin.
#define SILU(G, E, D) \
	VADDPS    Y12, E, D;    \
	VBLENDVPS G, E, Y12, E; \
	VDIVPS    D, E, E;      \
	VMULPS    E, G, G

// func swigluAVX2(n int, dst, gate, up *float32)
TEXT ·swigluAVX2(SB), NOSPLIT, $0-32
	MOVQ n+0(FP), CX
	MOVQ dst+8(FP), DI
	MOVQ gate+16(FP), SI
	MOVQ up+24(FP), DX
	EXPCONSTS
	CMPQ CX, $16
	JLT  s8

s16loop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y6
	VORPS   actc<>+SIGN(SB), Y0, Y1 // -|g|
	VORPS   actc<>+SIGN(SB), Y6, Y7
	EXPV(Y1, Y2, Y3, Y4)
	EXPV(Y7, Y8, Y9, Y10)
	SILU(Y0, Y3, Y2)
	SILU(Y6, Y9, Y8)
	VMULPS  (DX), Y0, Y0
	VMULPS  32(DX), Y6, Y6
	VMOVUPS Y0, (DI)
	VMOVUPS Y6, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, DI
	COUNT(16, s16loop)

s8:
	TAIL(sdone)
	VMOVUPS (SI), Y0
	VORPS   actc<>+SIGN(SB), Y0, Y1
	EXPV(Y1, Y2, Y3, Y4)
	SILU(Y0, Y3, Y2)
	VMULPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)

sdone:
	VZEROUPPER
	RET

// func expSubSumAVX2(n int, m float32, x *float32) float32
TEXT ·expSubSumAVX2(SB), NOSPLIT, $0-28
	MOVQ         n+0(FP), CX
	VBROADCASTSS m+8(FP), Y11
	MOVQ         x+16(FP), SI
	EXPCONSTS
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1
	CMPQ         CX, $16
	JLT          e8

e16loop:
	VMOVUPS (SI), Y2
	VMOVUPS 32(SI), Y6
	VSUBPS  Y11, Y2, Y2
	VSUBPS  Y11, Y6, Y6
	EXPV(Y2, Y3, Y4, Y5)
	EXPV(Y6, Y7, Y8, Y9)
	VMOVUPS Y4, (SI)
	VMOVUPS Y8, 32(SI)
	VADDPS  Y4, Y0, Y0
	VADDPS  Y8, Y1, Y1
	ADDQ    $64, SI
	COUNT(16, e16loop)

e8:
	TAIL(edone)
	VMOVUPS (SI), Y2
	VSUBPS  Y11, Y2, Y2
	EXPV(Y2, Y3, Y4, Y5)
	VMOVUPS Y4, (SI)
	VADDPS  Y4, Y0, Y0

edone:
	VADDPS Y1, Y0, Y0
	HFOLD(VADDPS, VADDSS)
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func maxAVX2(n int, x *float32) float32
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ    n+0(FP), CX
	MOVQ    x+8(FP), SI
	VMOVUPS (SI), Y0
	VMOVUPS Y0, Y1
	VMOVUPS Y0, Y2
	VMOVUPS Y0, Y3
	CMPQ    CX, $32
	JLT     m8

m32loop:
	VMAXPS (SI), Y0, Y0
	VMAXPS 32(SI), Y1, Y1
	VMAXPS 64(SI), Y2, Y2
	VMAXPS 96(SI), Y3, Y3
	ADDQ   $128, SI
	COUNT(32, m32loop)

m8:
	TAIL(mdone)

m8loop:
	VMAXPS (SI), Y0, Y0
	ADDQ   $32, SI
	SUBQ   $8, CX
	JNZ    m8loop

mdone:
	FOLD4(VMAXPS)
	HFOLD(VMAXPS, VMAXSS)
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleAVX2(n int, a float32, x *float32)
TEXT ·scaleAVX2(SB), NOSPLIT, $0-24
	MOVQ         n+0(FP), CX
	VBROADCASTSS a+8(FP), Y15
	MOVQ         x+16(FP), SI
	CMPQ         CX, $32
	JLT          c8

c32loop:
	VMULPS  (SI), Y15, Y0
	VMULPS  32(SI), Y15, Y1
	VMULPS  64(SI), Y15, Y2
	VMULPS  96(SI), Y15, Y3
	STORE4(SI)
	ADDQ    $128, SI
	COUNT(32, c32loop)

c8:
	TAIL(cdone)

c8loop:
	VMULPS  (SI), Y15, Y0
	VMOVUPS Y0, (SI)
	ADDQ    $32, SI
	SUBQ    $8, CX
	JNZ     c8loop

cdone:
	VZEROUPPER
	RET
