#include "textflag.h"
#include "packed_vnni_amd64.h"

// AVX-512 VNNI kernels for packed Q8_0 and Q4_0 weights, four panels (32 rows) at once: the
// computation of packed_vnni512_amd64.s (same sums, same corrections, the same float operations in
// the same order on every row, so bit-identical results) with the registers blocked over 32 rows
// and the columns. The pair kernels spend one VPDPBUSD per weight register and column, each with
// its own broadcast load of the column's 4 activations, and load and insert a weight register for
// every 4 of them: on an AMD EPYC Zen 5 (two 512-bit VPDPBUSD a cycle) the loads, not the VNNI
// units, bound them (44% of the peak). Here a chunk fills two weight registers (panels p and p+1
// in Z0, p+2 and p+3 in Z1, as ZLOAD), each column's 4 activations are broadcast once into a
// register, and each broadcast feeds both weight registers: 8 VPDPBUSD per chunk for 4 broadcasts
// and 4 weight loads, into 8 independent sums (no even/odd split).
//
// Q4_0 decodes both nibbles to 16 times their value (Q4W): the low ones shifted up, the high ones
// in place, so that one sum per column and 16 rows takes both halves of a chunk (the pair kernels
// keep a low and a high sum and join them per block, see V4W); the sum is the same integer,
// 16·Σ (q-8)·x, from the same correction.
//
// np must be a multiple of 4 (the Go side runs the rest with the pair and one-panel kernels).
// Registers: BX quads left; CX blocks left; SI the block of panel p, R14 the bytes of one panel
// (panel p+1's block at (SI)(R14*1), p+2's at (SI)(R14*2), p+3's at (SI)(AX*1), AX = 3·R14); DI,
// R10, R12, R13 columns 0-3 (R8 apart); R11 nx; DX out; R9 the block's activation sums; Z31 the
// 0x80 or 0xf0 bytes; Z0-Z1 (Q4_0: Z0-Z1 high, Z3-Z4 low) weights; Z2, Z5 broadcast activations;
// Z6, Z7 the row scales of panels p, p+1 and p+2, p+3; Z8-Z11 and Z12-Z15 the columns' integer
// sums of rows 0-15 and 16-31; Z16-Z19 and Z20-Z23 their results; Z28-Z29 scratch.

#define QP_PROLOGUE(mask, bs) \
	GROUP_ARGS(2, bs);              \
	LEAQ         (R14)(R14*2), AX; \
	PANEL_ARGS;                     \
	MOVL         $mask, R9;        \
	VPBROADCASTD R9, Z31

#define QP_QUAD \
	VP_COLS; \
	CLEAR4(VPXORD, Z16, Z17, Z18, Z19); \
	CLEAR4(VPXORD, Z20, Z21, Z22, Z23)

// QSCALES loads the 32 rows' f16 scales of the block.
#define QSCALES \
	VMOVDQU     (SI), X6;                \
	VINSERTI128 $1, (SI)(R14*1), Y6, Y6; \
	VCVTPH2PS   Y6, Z6;                  \
	VMOVDQU     (SI)(R14*2), X7;         \
	VINSERTI128 $1, (SI)(AX*1), Y7, Y7;  \
	VCVTPH2PS   Y7, Z7

// QI1-QI4 start the first n columns' sums at the corrections.
#define QI(off, a, b) VPBROADCASTD off(R9), a; VMOVDQA32 a, b
#define QI1 QI(0, Z8, Z12)
#define QI2 QI1; QI(4, Z9, Z13)
#define QI3 QI2; QI(8, Z10, Z14)
#define QI4 QI3; QI(12, Z11, Z15)

// QLOAD(off, Z0, Y0, Z1, Y1) loads the 32 bytes at off of the four panels' blocks: p and p+1
// into Z0, p+2 and p+3 into Z1.
#define QLOAD(off, Za, Ya, Zb, Yb) \
	VMOVDQU      off(SI), Ya;                \
	VINSERTI64X4 $1, off(SI)(R14*1), Za, Za; \
	VMOVDQU      off(SI)(R14*2), Yb;         \
	VINSERTI64X4 $1, off(SI)(AX*1), Zb, Zb

// Q8_0: chunk c as unsigned w+128; column P's activations times both weight registers.
#define Q8W(c) QLOAD(16+32*c, Z0, Y0, Z1, Y1); VPXORD Z31, Z0, Z0; VPXORD Z31, Z1, Z1

#define Q8X(c, P, a, b) \
	VPBROADCASTD 2+4*c(P), Z2; \
	VPDPBUSD     Z2, Z0, a;    \
	VPDPBUSD     Z2, Z1, b

#define Q8C1(c) Q8W(c); Q8X(c, DI, Z8, Z12)
#define Q8C2(c) Q8C1(c); Q8X(c, R10, Z9, Z13)
#define Q8C3(c) Q8C2(c); Q8X(c, R12, Z10, Z14)
#define Q8C4(c) Q8C3(c); Q8X(c, R13, Z11, Z15)
#define Q8BLOCK(C) C(0); C(1); C(2); C(3); C(4); C(5); C(6); C(7)

// Q4_0: chunk c's nibbles as 16q (0xf0 in Z31): the high ones in place (Z0, Z1; elements
// 16+4c..), the low ones shifted up a nibble (Z3, Z4; elements 4c..). A 16-bit shift moves each
// byte's high nibble into the next byte's low one, which the mask clears.
#define Q4W(c) \
	QLOAD(16+32*c, Z0, Y0, Z1, Y1); \
	VPSLLW $4, Z0, Z3;              \
	VPSLLW $4, Z1, Z4;              \
	VPANDD Z31, Z0, Z0;             \
	VPANDD Z31, Z1, Z1;             \
	VPANDD Z31, Z3, Z3;             \
	VPANDD Z31, Z4, Z4

#define Q4X(c, P, a, b) \
	VPBROADCASTD 2+4*c(P), Z2;  \
	VPDPBUSD     Z2, Z3, a;     \
	VPDPBUSD     Z2, Z4, b;     \
	VPBROADCASTD 18+4*c(P), Z5; \
	VPDPBUSD     Z5, Z0, a;     \
	VPDPBUSD     Z5, Z1, b

#define Q4C1(c) Q4W(c); Q4X(c, DI, Z8, Z12)
#define Q4C2(c) Q4C1(c); Q4X(c, R10, Z9, Z13)
#define Q4C3(c) Q4C2(c); Q4X(c, R12, Z10, Z14)
#define Q4C4(c) Q4C3(c); Q4X(c, R13, Z11, Z15)
#define Q4BLOCK(C) C(0); C(1); C(2); C(3)

// QFLOAT: both halves' facc += float(acc) · (row scales · the column's scale at F), the
// operations of ZFLOAT (one broadcast of the column's scale for both).
#define QFLOAT(F, a, b, fa, fb) \
	VBROADCASTSS F, Z28;     \
	VCVTDQ2PS    a, a;       \
	VCVTDQ2PS    b, b;       \
	VMULPS       Z28, Z6, Z29; \
	VMULPS       Z28, Z7, Z28; \
	VFMADD231PS  Z29, a, fa; \
	VFMADD231PS  Z28, b, fb

#define QS1 QFLOAT(16(R9), Z8, Z12, Z16, Z20)
#define QS2 QS1; QFLOAT(20(R9), Z9, Z13, Z17, Z21)
#define QS3 QS2; QFLOAT(24(R9), Z10, Z14, Z18, Z22)
#define QS4 QS3; QFLOAT(28(R9), Z11, Z15, Z19, Z23)

#define Q8B(I, C, S) QSCALES; I; Q8BLOCK(C); S; VP_ADVANCE(272)
#define Q4B(I, C, S) QSCALES; I; Q4BLOCK(C); S; VP_ADVANCE(144)

// QDIV16 divides the Q4_0 results by 16 (see ZDIV16).
#define QDIV16 \
	MOVL         $0x3d800000, R9; \
	VPBROADCASTD R9, Z0;          \
	VMULPS       Z0, Z16, Z16;    \
	VMULPS       Z0, Z17, Z17;    \
	VMULPS       Z0, Z18, Z18;    \
	VMULPS       Z0, Z19, Z19;    \
	VMULPS       Z0, Z20, Z20;    \
	VMULPS       Z0, Z21, Z21;    \
	VMULPS       Z0, Z22, Z22;    \
	VMULPS       Z0, Z23, Z23

// QSTORE_HI stores the results of rows 16-31 (Z20-Z23) of the nx columns, 64 bytes after those
// of rows 0-15, which PANEL_STORE stores.
#define QSTORE_HI(done) PANEL_STORE_AT(64, Z20, Z21, Z22, Z23, done); done:

// QP_STEP moves to the next quad's 32 outputs and weights (SI is at panel p+1 after the blocks
// of panel p).
#define QP_STEP ADDQ $128, DX; ADDQ AX, SI

#define QP_LOOPS(S1, S2, S3, S4, FIX, lhi, lp, l1, l2, l3, l4, ldone, lnext) \
	PANEL_LOOPS(QP_QUAD, S1, S2, S3, S4, FIX; QSTORE_HI(lhi), Z16, Z17, Z18, Z19, QP_STEP, lp, l1, l2, l3, l4, ldone, lnext)

// func q8Panel4VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// np a multiple of 4; sums: panelSums with m = -128.
TEXT ·q8Panel4VNNI(SB), NOSPLIT, $0-72
	QP_PROLOGUE(0x80808080, 34)
	QP_LOOPS(Q8B(QI1, Q8C1, QS1), Q8B(QI2, Q8C2, QS2), Q8B(QI3, Q8C3, QS3), Q8B(QI4, Q8C4, QS4), VP_NOFIX, q8hi, q8p, q8n1, q8n2, q8n3, q8n4, q8done, q8next)

// func q4Panel4VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// np a multiple of 4; sums: panelSums with m = -128.
TEXT ·q4Panel4VNNI(SB), NOSPLIT, $0-72
	QP_PROLOGUE(0xf0f0f0f0, 18)
	QP_LOOPS(Q4B(QI1, Q4C1, QS1), Q4B(QI2, Q4C2, QS2), Q4B(QI3, Q4C3, QS3), Q4B(QI4, Q4C4, QS4), QDIV16, q4hi, q4p, q4n1, q4n2, q4n3, q4n4, q4done, q4next)
