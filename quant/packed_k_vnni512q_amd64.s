#include "textflag.h"
#include "packed_k_amd64.h"

// AVX-512 VNNI kernel for packed Q4_K weights, four panels (32 rows) at once: the computation of
// q4KPanel2VNNI (packed_k_vnni512_amd64.s: the same integer sums, mins and folding, every row's
// float operations in the same order, so bit-identical results) with the registers blocked over
// 32 rows and the columns, as q8Panel4VNNI (packed_vnni512q_amd64.s). The pair kernel spends one
// VPDPBUSD per nibble half, chunk and column, each with its own embedded-broadcast load of the
// column's 4 activations; here a chunk is decoded into four weight registers (low and high
// nibbles of panels p, p+1 and of p+2, p+3), each column's two activation dwords are broadcast
// once into a register and each feeds two weight registers: 16 register-form VPDPBUSD per chunk
// for 8 broadcasts and 4 weight loads (the pair kernel: 8 VPDPBUSD, 8 broadcasts, 2 loads).
//
// A sub-block's sum takes the low and high nibbles' products in one register for 3 or 4
// columns (the pair kernel keeps two and adds them at the sub-block end: the same integer); with
// 1 or 2 columns, whose other registers are free, column j's high nibbles go to column j+2's
// sums, joined at the sub-block end, so that 8 sums are in flight. The scale/min vectors
// U_0..U_3 of both register halves and the zmm shuffle tables live in the frame.
//
// np must be a multiple of 4 (the Go side runs the rest with the pair and one-panel kernels).
// Registers: BX quads left; CX super-blocks left; SI the super-block of panel p, R14 the bytes of
// one panel (panel p+1's super-block at (SI)(R14*1), p+2's at (SI)(R14*2), p+3's at (SI)(AX*1),
// AX = 3·R14); DI, R10, R12, R13 columns 0-3 (R8 apart); R11 nx; DX out. Z0-Z3 and Z4-Z7: the
// sub-block sums of columns 0-3, rows 0-15 and 16-31 (the min sums at the end); Z8-Z11: a chunk's
// low and high nibbles of rows 0-15, low and high of rows 16-31 (scales, d and dmin at sub-block
// and super-block ends); Z12, Z13: broadcast activations; Z14: 0x0f bytes; Z16-Z19 and Z20-Z23:
// the super-block's Σ sc·dot; Z24-Z27 and Z28-Z31: results.
//
// Frame: U_q of rows 0-15 at 128q, of rows 16-31 at 128q+64. The shuffles come from qk4tab,
// the 256-bit kernels' tables repeated over 512 bits (VPSHUFB takes them as memory operands).

// QK_PROLOGUE is ZKP_PROLOGUE for fours of panels (BX counts them; AX = 3·R14); Zm = the bytes
// of mask.
#define QK_PROLOGUE(bs, mask, Zm) \
	KP_ARGS;               \
	SHRQ  $2, BX;          \
	MOVQ  nb+8(FP), R14;   \
	IMULQ $bs, R14;        \
	LEAQ  (R14)(R14*2), AX; \
	MOVL  $mask, R9;       \
	VPBROADCASTD R9, Zm

// QKLOAD0 and QKLOAD1: the 32 bytes at off of panels p and p+1 (QKLOAD0) or p+2 and p+3.
#define QKLOAD0(off, Zr, Yr) \
	VMOVDQU64    off(SI), Yr; \
	VINSERTI64X4 $1, off(SI)(R14*1), Zr, Zr

#define QKLOAD1(off, Zr, Yr) \
	VMOVDQU64    off(SI)(R14*2), Yr; \
	VINSERTI64X4 $1, off(SI)(AX*1), Zr, Zr

// QKHALF(off, L, Zr, Yr, Xr): the 16 bytes at off of two panels (L's), as 16 float32.
#define QKHALF0(off, Zr, Yr, Xr) \
	VMOVDQU     off(SI), Xr;                \
	VINSERTI128 $1, off(SI)(R14*1), Yr, Yr; \
	VCVTPH2PS   Yr, Zr

#define QKHALF1(off, Zr, Yr, Xr) \
	VMOVDQU     off(SI)(R14*2), Xr;      \
	VINSERTI128 $1, off(SI)(AX*1), Yr, Yr; \
	VCVTPH2PS   Yr, Zr

// QK4UNPACK rebuilds U_0..U_3 of two panels (L) into the frame at 64h, as ZK4UNPACK: Z8 = C,
// Z9 = A then B, Z12 = k4m30.
#define QK4UNPACK(L, h) \
	L(96, Z8, Y8);               \
	L(32, Z9, Y9);               \
	VPANDD    Z14, Z9, Z10;      \
	VPSLLW    $4, Z8, Z11;       \
	VPANDD    Z12, Z11, Z11;     \
	VPORD     Z11, Z10, Z10;     \
	VMOVDQU64 Z10, 64*h(SP);     \
	VPSRLW    $4, Z9, Z10;       \
	VPANDD    Z14, Z10, Z10;     \
	VPSLLW    $2, Z8, Z11;       \
	VPANDD    Z12, Z11, Z11;     \
	VPORD     Z11, Z10, Z10;     \
	VMOVDQU64 Z10, 128+64*h(SP); \
	L(64, Z9, Y9);               \
	VPANDD    Z14, Z9, Z10;      \
	VPANDD    Z12, Z8, Z11;      \
	VPORD     Z11, Z10, Z10;     \
	VMOVDQU64 Z10, 256+64*h(SP); \
	VPSRLW    $4, Z9, Z10;       \
	VPANDD    Z14, Z10, Z10;     \
	VPSRLW    $2, Z8, Z11;       \
	VPANDD    Z12, Z11, Z11;     \
	VPORD     Z11, Z10, Z10;     \
	VMOVDQU64 Z10, 384+64*h(SP)

// QK4W decodes chunk c of sub-block s of the four panels into Z8-Z11.
#define QK4W(s, c) \
	QKLOAD0(128+128*s+32*c, Z8, Y8);   \
	QKLOAD1(128+128*s+32*c, Z10, Y10); \
	VPSRLW $4, Z8, Z9;                 \
	VPSRLW $4, Z10, Z11;               \
	VPANDD Z14, Z8, Z8;                \
	VPANDD Z14, Z9, Z9;                \
	VPANDD Z14, Z10, Z10;              \
	VPANDD Z14, Z11, Z11

// QK4X adds column P's products of the chunk: the low nibbles' to l0 (rows 0-15) and l1 (rows
// 16-31), the high ones' to h0 and h1.
#define QK4X(s, c, P, l0, l1, h0, h1) \
	VPBROADCASTD 4+32*s+4*c(P), Z12;  \
	VPDPBUSD     Z12, Z8, l0;         \
	VPDPBUSD     Z12, Z10, l1;        \
	VPBROADCASTD 20+32*s+4*c(P), Z13; \
	VPDPBUSD     Z13, Z9, h0;         \
	VPDPBUSD     Z13, Z11, h1

#define QK4C1(s, c) QK4X(s, c, DI, Z0, Z4, Z2, Z6)
#define QK4C2(s, c) QK4C1(s, c); QK4X(s, c, R10, Z1, Z5, Z3, Z7)
#define QK4C3(s, c) QK4X(s, c, DI, Z0, Z4, Z3, Z7); QK4X(s, c, R10, Z1, Z5, Z1, Z5); QK4X(s, c, R12, Z2, Z6, Z2, Z6)
#define QK4C4(s, c) QK4X(s, c, DI, Z0, Z4, Z0, Z4); QK4X(s, c, R10, Z1, Z5, Z1, Z5); QK4X(s, c, R12, Z2, Z6, Z2, Z6); QK4X(s, c, R13, Z3, Z7, Z3, Z7)

// QK4J1-QK4J4 join the high nibbles' sums kept apart (see QK4C1-QK4C3) into the columns' own.
#define QK4J1 VPADDD Z2, Z0, Z0; VPADDD Z6, Z4, Z4
#define QK4J2 QK4J1; VPADDD Z3, Z1, Z1; VPADDD Z7, Z5, Z5
#define QK4J3 VPADDD Z3, Z0, Z0; VPADDD Z7, Z4, Z4
#define QK4J4

#define QK4Z CLEAR4(VPXORD, Z0, Z1, Z2, Z3); CLEAR4(VPXORD, Z4, Z5, Z6, Z7)

// Sub-block ends: the sums times the scales (Z8 rows 0-15, Z9 rows 16-31) into the super-block
// sums (QK4SF for sub-block 0 sets them).
#define QK4SFA(a0, a1, i0, i1) VPMULLD Z8, a0, i0; VPMULLD Z9, a1, i1
#define QK4SF1 QK4SFA(Z0, Z4, Z16, Z20)
#define QK4SF2 QK4SF1; QK4SFA(Z1, Z5, Z17, Z21)
#define QK4SF3 QK4SF2; QK4SFA(Z2, Z6, Z18, Z22)
#define QK4SF4 QK4SF3; QK4SFA(Z3, Z7, Z19, Z23)

#define QK4SA(a0, a1, i0, i1) \
	VPMULLD Z8, a0, a0;   \
	VPMULLD Z9, a1, a1;   \
	VPADDD  a0, i0, i0;   \
	VPADDD  a1, i1, i1

#define QK4S1 QK4SA(Z0, Z4, Z16, Z20)
#define QK4S2 QK4S1; QK4SA(Z1, Z5, Z17, Z21)
#define QK4S3 QK4S2; QK4SA(Z2, Z6, Z18, Z22)
#define QK4S4 QK4S3; QK4SA(Z3, Z7, Z19, Z23)

// QK4SUB runs sub-block s, its scales picked from U (a frame offset) with the table entry T
// (an address before (SB)): the chunks (C), the join (J), then S.
#define QK4SUB(s, U, T, J, F, C, S) \
	QK4Z;                       \
	K4CHUNKS(s, QK4W, F, C);    \
	J;                          \
	VMOVDQU64 U(SP), Z10;       \
	VMOVDQU64 U+64(SP), Z11;    \
	VPSHUFB   T(SB), Z10, Z8;   \
	VPSHUFB   T(SB), Z11, Z9;   \
	S

// Min sums: column P's macc0 (rows 0-15), macc1 (rows 16-31) += (m, m)·(bsum_2s, bsum_2s+1) per
// lane, with the pairs in Z8 and Z9: VPDPWSSD, the same dword as K4MINA's VPMADDWD and VPADDD.
#define QK4MX(s, P, m0, m1) \
	VPBROADCASTD 260+4*s(P), Z12; \
	VPDPWSSD     Z12, Z8, m0;     \
	VPDPWSSD     Z12, Z9, m1

#define QK4M1(s) QK4MX(s, DI, Z0, Z4)
#define QK4M2(s) QK4M1(s); QK4MX(s, R10, Z1, Z5)
#define QK4M3(s) QK4M2(s); QK4MX(s, R12, Z2, Z6)
#define QK4M4(s) QK4M3(s); QK4MX(s, R13, Z3, Z7)

// QK4MQ runs the min sums of sub-blocks 2q and 2q+1 from U_q (frame offset 128q).
#define QK4MQ(q, M) \
	VMOVDQU64 128*q(SP), Z10;          \
	VMOVDQU64 128*q+64(SP), Z11;       \
	VPSHUFB   ·qk4tab+128(SB), Z10, Z8; \
	VPSHUFB   ·qk4tab+128(SB), Z11, Z9; \
	M((2*q));                          \
	VPSHUFB   ·qk4tab+192(SB), Z10, Z8; \
	VPSHUFB   ·qk4tab+192(SB), Z11, Z9; \
	M((2*q+1))

#define QK4MINS(M) QK4Z; QK4MQ(0, M); QK4MQ(1, M); QK4MQ(2, M); QK4MQ(3, M)

// QK4FOLD: K4FOLDR for both row halves of column P (d in Z8, Z9, dmin in Z10, Z11), one
// broadcast of the column's scale.
#define QK4FOLD(P, m0, m1, i0, i1, f0, f1) \
	VCVTDQ2PS    i0, i0;       \
	VCVTDQ2PS    m0, m0;       \
	VMULPS       Z8, i0, i0;   \
	VFNMADD231PS Z10, m0, i0;  \
	VCVTDQ2PS    i1, i1;       \
	VCVTDQ2PS    m1, m1;       \
	VMULPS       Z9, i1, i1;   \
	VFNMADD231PS Z11, m1, i1;  \
	VBROADCASTSS (P), Z12;     \
	VFMADD231PS  Z12, i0, f0;  \
	VFMADD231PS  Z12, i1, f1

#define QK4FOLD1 QK4FOLD(DI, Z0, Z4, Z16, Z20, Z24, Z28)
#define QK4FOLD2 QK4FOLD1; QK4FOLD(R10, Z1, Z5, Z17, Z21, Z25, Z29)
#define QK4FOLD3 QK4FOLD2; QK4FOLD(R12, Z2, Z6, Z18, Z22, Z26, Z30)
#define QK4FOLD4 QK4FOLD3; QK4FOLD(R13, Z3, Z7, Z19, Z23, Z27, Z31)

#define QK4BLOCK(C, J, SF, S, M, FOLD) \
	VPBROADCASTD ·k4m30(SB), Z12;                                                  \
	QK4UNPACK(QKLOAD0, 0);                                                         \
	QK4UNPACK(QKLOAD1, 1);                                                         \
	K4SUBS(QK4SUB, 0, 128, 256, 384, ·qk4tab+0, ·qk4tab+64, J, C, C, SF, S);          \
	QK4MINS(M);                                                                    \
	QKHALF0(0, Z8, Y8, X8);                                                        \
	QKHALF1(0, Z9, Y9, X9);                                                        \
	QKHALF0(16, Z10, Y10, X10);                                                    \
	QKHALF1(16, Z11, Y11, X11);                                                    \
	FOLD;                                                                          \
	KP_NEXT(1152)

#define QK4B1 QK4BLOCK(QK4C1, QK4J1, QK4SF1, QK4S1, QK4M1, QK4FOLD1)
#define QK4B2 QK4BLOCK(QK4C2, QK4J2, QK4SF2, QK4S2, QK4M2, QK4FOLD2)
#define QK4B3 QK4BLOCK(QK4C3, QK4J3, QK4SF3, QK4S3, QK4M3, QK4FOLD3)
#define QK4B4 QK4BLOCK(QK4C4, QK4J4, QK4SF4, QK4S4, QK4M4, QK4FOLD4)

// QK_START starts a quad: its columns and super-blocks from the start, the results cleared.
#define QK_START \
	KP_PANEL;                           \
	CLEAR4(VPXORD, Z24, Z25, Z26, Z27); \
	CLEAR4(VPXORD, Z28, Z29, Z30, Z31)

// QK_STORE_HI stores the results of rows 16-31 (Z28-Z31) of the nx columns, 64 bytes after those
// of rows 0-15, which PANEL_STORE stores.
#define QK_STORE_HI(done) PANEL_STORE_AT(64, Z28, Z29, Z30, Z31, done); done:

// QK_STEP moves to the next quad's 32 outputs and weights (SI is at panel p+1 after the
// super-blocks of panel p).
#define QK_STEP ADDQ $128, DX; ADDQ AX, SI

// func q4KPanel4VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)
// np a multiple of 4.
TEXT ·q4KPanel4VNNI(SB), NOSPLIT, $512-64
	QK_PROLOGUE(1152, 0x0f0f0f0f, Z14)
	PANEL_LOOPS(QK_START, QK4B1, QK4B2, QK4B3, QK4B4, QK_STORE_HI(qk4hi), Z24, Z25, Z26, Z27, QK_STEP, qk4p, qk4n1, qk4n2, qk4n3, qk4n4, qk4done, qk4next)

// ---------------------------------------------------------------------------------------------
// Q6_K on four panels: q6KPanel2VNNI's sums with VPDPBUSD instead of VPMADDUBSW, VPADDW and
// VPDPWSSD. A group's 16 elements are decoded into four level vectors per row half (P, Q and R
// masked, and their bits 6-7 joined, as ZQ6DA and ZQ6DB); each column's 4 activation dwords are
// broadcast once and each feeds two level vectors (rows 0-15 and 16-31), 8 VPDPBUSD per column
// and group into dword sums, which VPMULLD scales by the group's scale (sign-extended from the
// scale pairs) into the super-block sums; the level offsets go there too, as in the pair kernel
// (VPDPWSSD of the bsum pair with −32 times the scale pairs). The integer sum is the pair
// kernel's, Σ_g sc_g·(dot_g − 32·bsum_g), exactly: a group's dot is at most 16·63·128, times
// |sc| <= 128 and summed over 16 groups far inside int32. Folding as Q6FOLDR, the same float
// operations per row in the same order.
//
// Registers: Z0-Z3 and Z4-Z7: the group sums of columns 0-3, rows 0-15 and 16-31 (split for 1-3
// columns as QK4C1-QK4C3); Z8-Z11 and Z12-Z15: the group's levels of elements 0-3, 4-7, 8-11 and
// 12-15, rows 0-15 and 16-31 (d at the end of a super-block); Z16-Z19 and Z20-Z23: the
// super-block's integer sums; Z24: a broadcast; Z25: scratch; Z26, Z27: the group pair's scale
// pairs of rows 0-15 and 16-31, then −32 times them; Z28, Z29: the group's scales; Z30: 0x3f
// bytes; Z31: zero. The frame holds the results: column j's rows 0-15 at 128j, rows 16-31 at
// 128j+64.

// QKLOADB0 and QKLOADB1: QKLOAD0 and QKLOAD1 from the group pair at BX.
#define QKLOADB0(off, Zr, Yr) \
	VMOVDQU64    off(BX), Yr; \
	VINSERTI64X4 $1, off(BX)(R14*1), Zr, Zr

#define QKLOADB1(off, Zr, Yr) \
	VMOVDQU64    off(BX)(R14*2), Yr; \
	VINSERTI64X4 $1, off(BX)(AX*1), Zr, Zr

// Q6QLEV decodes group u (0 or 1) of the pair of two panels (L) into l0-l3 (their ymm halves
// y0-y2 for the loads).
#define Q6QLEV(L, u, l0, l1, l2, l3, y0, y1, y2) \
	L(144+96*u, l0, y0);  \
	L(176+96*u, l1, y1);  \
	L(208+96*u, l2, y2);  \
	VPANDND l0, Z30, l3;  \
	VPSRLW  $2, l3, l3;   \
	VPANDND l1, Z30, Z25; \
	VPORD   Z25, l3, l3;  \
	VPSRLW  $2, l3, l3;   \
	VPANDND l2, Z30, Z25; \
	VPORD   Z25, l3, l3;  \
	VPSRLW  $2, l3, l3;   \
	VPANDD  Z30, l0, l0;  \
	VPANDD  Z30, l1, l1;  \
	VPANDD  Z30, l2, l2

// Q6QX adds column P's products of group u: elements 0-3 and 8-11 to a0 (rows 0-15) and a1
// (rows 16-31), elements 4-7 and 12-15 to b0 and b1.
#define Q6QX(u, P, a0, a1, b0, b1) \
	VPBROADCASTD 4+16*u(P)(R9*8), Z24;  \
	VPDPBUSD     Z24, Z8, a0;     \
	VPDPBUSD     Z24, Z12, a1;    \
	VPBROADCASTD 8+16*u(P)(R9*8), Z24;  \
	VPDPBUSD     Z24, Z9, b0;     \
	VPDPBUSD     Z24, Z13, b1;    \
	VPBROADCASTD 12+16*u(P)(R9*8), Z24; \
	VPDPBUSD     Z24, Z10, a0;    \
	VPDPBUSD     Z24, Z14, a1;    \
	VPBROADCASTD 16+16*u(P)(R9*8), Z24; \
	VPDPBUSD     Z24, Z11, b0;    \
	VPDPBUSD     Z24, Z15, b1

#define Q6QC1(u) Q6QX(u, DI, Z0, Z4, Z2, Z6)
#define Q6QC2(u) Q6QC1(u); Q6QX(u, R10, Z1, Z5, Z3, Z7)
#define Q6QC3(u) Q6QX(u, DI, Z0, Z4, Z3, Z7); Q6QX(u, R10, Z1, Z5, Z1, Z5); Q6QX(u, R12, Z2, Z6, Z2, Z6)
#define Q6QC4(u) Q6QX(u, DI, Z0, Z4, Z0, Z4); Q6QX(u, R10, Z1, Z5, Z1, Z5); Q6QX(u, R12, Z2, Z6, Z2, Z6); Q6QX(u, R13, Z3, Z7, Z3, Z7)

// Group ends: the sums times the group's scales (Z28, Z29) added to the super-block sums.
#define Q6QSA(a0, a1, i0, i1) \
	VPMULLD Z28, a0, a0; \
	VPMULLD Z29, a1, a1; \
	VPADDD  a0, i0, i0;  \
	VPADDD  a1, i1, i1

#define Q6QS1 Q6QSA(Z0, Z4, Z16, Z20)
#define Q6QS2 Q6QS1; Q6QSA(Z1, Z5, Z17, Z21)
#define Q6QS3 Q6QS2; Q6QSA(Z2, Z6, Z18, Z22)
#define Q6QS4 Q6QS3; Q6QSA(Z3, Z7, Z19, Z23)

// Q6QG runs group u: levels, the columns (C), the join (J, QK4J1-QK4J4), the scaling (S).
#define Q6QG(u, C, J, S) \
	Q6QLEV(QKLOADB0, u, Z8, Z9, Z10, Z11, Y8, Y9, Y10);    \
	Q6QLEV(QKLOADB1, u, Z12, Z13, Z14, Z15, Y12, Y13, Y14); \
	QK4Z;                                                  \
	C(u);                                                  \
	J;                                                     \
	S

#define Q6QG1(u) Q6QG(u, Q6QC1, QK4J1, Q6QS1)
#define Q6QG2(u) Q6QG(u, Q6QC2, QK4J2, Q6QS2)
#define Q6QG3(u) Q6QG(u, Q6QC3, QK4J3, Q6QS3)
#define Q6QG4(u) Q6QG(u, Q6QC4, QK4J4, Q6QS4)

// Level offsets of group pair i: column P's bsum pair times −32 times the scale pairs.
#define Q6QOX(P, i0, i1) \
	VPBROADCASTD 260(P)(R9*1), Z24;  \
	VPDPWSSD     Z24, Z26, i0;    \
	VPDPWSSD     Z24, Z27, i1

#define Q6QO1 Q6QOX(DI, Z16, Z20)
#define Q6QO2 Q6QO1; Q6QOX(R10, Z17, Z21)
#define Q6QO3 Q6QO2; Q6QOX(R12, Z18, Z22)
#define Q6QO4 Q6QO3; Q6QOX(R13, Z19, Z23)

// Q6QP runs the group pair i = R9/4 (its scale pairs at R8, its units at BX): the scale pairs
// of both row halves sign-extended to words, group 2i's scales their low words sign-extended to
// dwords, 2i+1's the high words.
#define Q6QP(G, O) \
	VMOVDQU64    16(R8), X26;                 \
	VINSERTI32X4 $1, 16(R8)(R14*1), Y26, Y26; \
	VPMOVSXBW    Y26, Z26;                    \
	VMOVDQU64    16(R8)(R14*2), X27;          \
	VINSERTI32X4 $1, 16(R8)(AX*1), Y27, Y27;  \
	VPMOVSXBW   Y27, Z27;                         \
	VPSLLD      $16, Z26, Z28;                    \
	VPSRAD      $16, Z28, Z28;                    \
	VPSLLD      $16, Z27, Z29;                    \
	VPSRAD      $16, Z29, Z29;                    \
	G(0);                                         \
	VPSRAD      $16, Z26, Z28;                    \
	VPSRAD      $16, Z27, Z29;                    \
	G(1);                                         \
	VPSLLW      $5, Z26, Z26;                     \
	VPSUBW      Z26, Z31, Z26;                    \
	VPSLLW      $5, Z27, Z27;                     \
	VPSUBW      Z27, Z31, Z27;                    \
	O

// Q6QFOLD folds column P's sums (i0 rows 0-15, i1 rows 16-31) into its results at off in the
// frame, as Q6FOLDR (d in Z8 and Z12).
#define Q6QFOLD(P, i0, i1, off) \
	VCVTDQ2PS    i0, i0;            \
	VCVTDQ2PS    i1, i1;            \
	VBROADCASTSS (P), Z24;          \
	VMULPS       Z8, Z24, Z9;       \
	VMULPS       Z12, Z24, Z13;     \
	VMOVUPS      off(SP), Z10;      \
	VFMADD231PS  Z9, i0, Z10;       \
	VMOVUPS      Z10, off(SP);      \
	VMOVUPS      off+64(SP), Z14;   \
	VFMADD231PS  Z13, i1, Z14;      \
	VMOVUPS      Z14, off+64(SP)

#define Q6QFOLD1 Q6QFOLD(DI, Z16, Z20, 0)
#define Q6QFOLD2 Q6QFOLD1; Q6QFOLD(R10, Z17, Z21, 128)
#define Q6QFOLD3 Q6QFOLD2; Q6QFOLD(R12, Z18, Z22, 256)
#define Q6QFOLD4 Q6QFOLD3; Q6QFOLD(R13, Z19, Z23, 384)

// Q6QBLOCK runs a super-block: the group pairs in a loop (lp its label; R9 = 4i, R8 and BX at
// pair i's scales and units), not unrolled as in the pair kernel, whose 16 groups would be
// 2-3 times the code here.
#define Q6QBLOCK(G, O, FOLD, lp) \
	CLEAR4(VPXORD, Z16, Z17, Z18, Z19); \
	CLEAR4(VPXORD, Z20, Z21, Z22, Z23); \
	MOVQ SI, R8;                        \
	MOVQ SI, BX;                        \
	XORQ R9, R9;                        \
lp:                                     \
	Q6QP(G, O);                         \
	ADDQ $16, R8;                       \
	ADDQ $192, BX;                      \
	ADDQ $4, R9;                        \
	CMPQ R9, $32;                       \
	JLT  lp;                            \
	QKHALF0(0, Z8, Y8, X8);             \
	QKHALF1(0, Z12, Y12, X12);          \
	FOLD;                               \
	KP_NEXT(1680)

#define Q6QB1 Q6QBLOCK(Q6QG1, Q6QO1, Q6QFOLD1, q6qg1)
#define Q6QB2 Q6QBLOCK(Q6QG2, Q6QO2, Q6QFOLD2, q6qg2)
#define Q6QB3 Q6QBLOCK(Q6QG3, Q6QO3, Q6QFOLD3, q6qg3)
#define Q6QB4 Q6QBLOCK(Q6QG4, Q6QO4, Q6QFOLD4, q6qg4)

// Q6Q_START starts a quad: columns and super-blocks from the start, the results in the frame
// cleared, Z31 zero and Z30 the mask again (Q6Q_END takes both for results); BX, the quads
// left, saved at 512 in the frame and R8 xStride again (the pair loops take both).
#define Q6Q_START \
	MOVQ      BX, 512(SP);     \
	MOVQ      xStride+32(FP), R8; \
	KP_PANEL;                  \
	MOVL      $0x3f3f3f3f, R9; \
	VPBROADCASTD R9, Z30;      \
	VPXORD    Z31, Z31, Z31;   \
	VMOVDQU64 Z31, 0(SP);      \
	VMOVDQU64 Z31, 64(SP);     \
	VMOVDQU64 Z31, 128(SP);    \
	VMOVDQU64 Z31, 192(SP);    \
	VMOVDQU64 Z31, 256(SP);    \
	VMOVDQU64 Z31, 320(SP);    \
	VMOVDQU64 Z31, 384(SP);    \
	VMOVDQU64 Z31, 448(SP)

// Q6Q_END loads the results for the stores (rows 0-15 to Z24-Z27, rows 16-31 to Z28-Z31).
#define Q6Q_END \
	VMOVUPS 0(SP), Z24;   \
	VMOVUPS 128(SP), Z25; \
	VMOVUPS 256(SP), Z26; \
	VMOVUPS 384(SP), Z27; \
	VMOVUPS 64(SP), Z28;  \
	VMOVUPS 192(SP), Z29; \
	VMOVUPS 320(SP), Z30; \
	VMOVUPS 448(SP), Z31; \
	MOVQ    512(SP), BX;  \
	QK_STORE_HI(q6qhi)

// func q6KPanel4VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)
// np a multiple of 4.
TEXT ·q6KPanel4VNNI(SB), NOSPLIT, $520-64
	QK_PROLOGUE(1680, 0x3f3f3f3f, Z30)
	PANEL_LOOPS(Q6Q_START, Q6QB1, Q6QB2, Q6QB3, Q6QB4, Q6Q_END, Z24, Z25, Z26, Z27, QK_STEP, q6qp, q6qn1, q6qn2, q6qn3, q6qn4, q6qdone, q6qnext)

// qk4tab: vk4sc+0 (+0), vk4sc+32 (+64), the sub-block scales as int32s; k4dup+32 (+128) and
// k4dup+96 (+192), the (m, m) pairs: each the same 16-byte pattern in all four lanes.
#define QK4TAB(off, lo, hi) LANES(·qk4tab, off, lo, hi); LANES(·qk4tab, off+32, lo, hi)

QK4TAB(0, 0x8080800480808000, 0x8080800c80808008)
QK4TAB(64, 0x8080800680808002, 0x8080800e8080800a)
QK4TAB(128, 0x8005800580018001, 0x800d800d80098009)
QK4TAB(192, 0x8007800780038003, 0x800f800f800b800b)
GLOBL ·qk4tab(SB), RODATA|NOPTR, $256
