#include "textflag.h"
#include "packed_vnni_amd64.h"

// AVX-VNNI kernels for packed Q8_0 and Q4_0 weights: the AVX-512 VNNI kernels'
// (packed_vnni_amd64.s) computation with only VEX encodings, for CPUs with AVX-VNNI and no
// AVX-512. Same operands and sums (panelSums with m = -128), so the same exactness and
// bit-identical results; but no embedded broadcasts (the activations and scales go through Y2
// and Y1) and no Y16-Y31.
//
// Go's assembler encodes VPDPBUSD only as EVEX, so VPDPBUSD_VEX writes the VEX form
// (VEX.256.66.0F38.W0 50 /r) by hand. Each kernel body is instantiated twice: with DP_VEX (the
// kernels the avxvnni path runs) and with DP_EVEX, the same instructions but the assembler's EVEX
// VPDPBUSD, so that the tests check the code on AVX-512 VNNI CPUs too; the encodings themselves
// were checked with objdump (each {vex} vpdpbusd names the registers DP_EVEX names).

// VPDPBUSD_VEX(d, u, s): Yd += Σ4 unsigned bytes of Yu times signed bytes of Ys, per dword.
// Register numbers 0-15. Bytes: C4, RXB.mmmmm (R and B inverted, map 0F38), W.vvvv.L.pp (vvvv =
// u inverted, L = 256 bits, pp = 66), opcode 50, ModRM (11, reg = d, rm = s).
#define VPDPBUSD_VEX(d, u, s) \
	BYTE $0xC4;                                           \
	BYTE $(0x42 | ((1-((d)>>3))<<7) | ((1-((s)>>3))<<5)); \
	BYTE $(((15-(u))<<3) | 0x05);                         \
	BYTE $0x50;                                           \
	BYTE $(0xC0 | (((d)&7)<<3) | ((s)&7))

// The product macros: acc (register number a) += u (number un) · s (number sn).
#define DP_VEX(acc, a, u, un, s, sn) VPDPBUSD_VEX(a, un, sn)
#define DP_EVEX(acc, a, u, un, s, sn) VPDPBUSD s, u, acc

// Registers beyond those of packed_amd64.h: Y2 the broadcast activations; Y3, Y4, Y6, Y7 the
// second integer sums of columns 0-3 (odd Q8_0 chunks, high Q4_0 nibbles), which halve the chains
// of dependent VPDPBUSDs (latency-bound with one or two columns otherwise); the row scales are
// loaded at the end of a block, into Y0, with Y1 as scratch.

// A8X adds Q8_0 chunk c (Y0) times column P's 4 activations to acc (register number a).
#define A8X(c, P, acc, a, DP) \
	VPBROADCASTD 2+4*c(P), Y2; \
	DP(acc, a, Y0, 0, Y2, 2)

// A4X adds Q4_0 chunk c (Y0 low, Y1 high nibbles) times column P's activations to acc and acc2.
#define A4X(c, P, acc, a, acc2, a2, DP) \
	VPBROADCASTD 2+4*c(P), Y2;  \
	DP(acc, a, Y0, 0, Y2, 2);   \
	VPBROADCASTD 18+4*c(P), Y2; \
	DP(acc2, a2, Y1, 1, Y2, 2)

// A_NEXT8 and A_NEXT4 start a block as VNEXT8 and VNEXT4 do, and the Bn below start the
// corrections with VI1-VI4 (packed_vnni_amd64.h) in these registers (the row scales come
// at the block's end; no prefetch, see VP_NEXT in packed_amd64.h).
#define A_NEXT8 CLEAR4(VPXOR, Y3, Y4, Y6, Y7)
#define A_NEXT4 CLEAR4(VPXOR, Y8, Y9, Y10, Y11)

// AFLOAT, ASCALE8 and ASCALE4 are VFLOAT, VSCALE8 and VSCALE4 (packed_vnni_amd64.s) in other
// registers: the row scales in Y0, the column's scale through Y1.
#define AFLOAT(F, acc, facc) \
	VCVTDQ2PS    acc, acc;   \
	VBROADCASTSS F, Y1;      \
	VMULPS       Y0, Y1, Y1; \
	VFMADD231PS  Y1, acc, facc

#define ASCALE8(F, acc, acc2, facc) SUM8(AFLOAT, F, acc, acc2, facc)
#define ASCALE4(F, acc, acc2, facc) SUM4(AFLOAT, F, acc, acc2, facc)

#define AROWS VCVTPH2PS (SI), Y0

#define AS1(SC) AROWS; SC(16(R9), Y8, Y3, Y12)
#define AS2(SC) AS1(SC); SC(20(R9), Y9, Y4, Y13)
#define AS3(SC) AS2(SC); SC(24(R9), Y10, Y6, Y14)
#define AS4(SC) AS3(SC); SC(28(R9), Y11, Y7, Y15)

// Q8_0 column sets: chunk c for the first n columns into the sums a0-a3 (numbers n0-n3).
#define A8C1(c, DP, a0, n0, a1, n1, a2, n2, a3, n3) V8W(c); A8X(c, DI, a0, n0, DP)
#define A8C2(c, DP, a0, n0, a1, n1, a2, n2, a3, n3) A8C1(c, DP, a0, n0, a1, n1, a2, n2, a3, n3); A8X(c, R10, a1, n1, DP)
#define A8C3(c, DP, a0, n0, a1, n1, a2, n2, a3, n3) A8C2(c, DP, a0, n0, a1, n1, a2, n2, a3, n3); A8X(c, R12, a2, n2, DP)
#define A8C4(c, DP, a0, n0, a1, n1, a2, n2, a3, n3) A8C3(c, DP, a0, n0, a1, n1, a2, n2, a3, n3); A8X(c, R13, a3, n3, DP)

#define A8E(C, c, DP) C(c, DP, Y8, 8, Y9, 9, Y10, 10, Y11, 11)
#define A8O(C, c, DP) C(c, DP, Y3, 3, Y4, 4, Y6, 6, Y7, 7)
#define A8BLOCK(C, DP) A8E(C, 0, DP); A8O(C, 1, DP); A8E(C, 2, DP); A8O(C, 3, DP); A8E(C, 4, DP); A8O(C, 5, DP); A8E(C, 6, DP); A8O(C, 7, DP)

#define A4C1(c, DP) V4W(c); A4X(c, DI, Y8, 8, Y3, 3, DP)
#define A4C2(c, DP) A4C1(c, DP); A4X(c, R10, Y9, 9, Y4, 4, DP)
#define A4C3(c, DP) A4C2(c, DP); A4X(c, R12, Y10, 10, Y6, 6, DP)
#define A4C4(c, DP) A4C3(c, DP); A4X(c, R13, Y11, 11, Y7, 7, DP)

#define A4BLOCK(C, DP) C(0, DP); C(1, DP); C(2, DP); C(3, DP)

#define A8B1(DP) VI1(Y8, Y9, Y10, Y11); A8BLOCK(A8C1, DP); AS1(ASCALE8)
#define A8B2(DP) VI2(Y8, Y9, Y10, Y11); A8BLOCK(A8C2, DP); AS2(ASCALE8)
#define A8B3(DP) VI3(Y8, Y9, Y10, Y11); A8BLOCK(A8C3, DP); AS3(ASCALE8)
#define A8B4(DP) VI4(Y8, Y9, Y10, Y11); A8BLOCK(A8C4, DP); AS4(ASCALE8)

#define A4B1(DP) VI1(Y3, Y4, Y6, Y7); A4BLOCK(A4C1, DP); AS1(ASCALE4)
#define A4B2(DP) VI2(Y3, Y4, Y6, Y7); A4BLOCK(A4C2, DP); AS2(ASCALE4)
#define A4B3(DP) VI3(Y3, Y4, Y6, Y7); A4BLOCK(A4C3, DP); AS3(ASCALE4)
#define A4B4(DP) VI4(Y3, Y4, Y6, Y7); A4BLOCK(A4C4, DP); AS4(ASCALE4)


// func q8PanelAVXVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
TEXT ·q8PanelAVXVNNI(SB), NOSPLIT, $0-72
	VP_PROLOGUE(0x80808080)
	VP_KERNEL(A_NEXT8, A8B1, A8B2, A8B3, A8B4, DP_VEX, 272, VP_NOFIX, a8p, a8n1, a8n2, a8n3, a8n4, a8done, a8next)

// func q4PanelAVXVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
TEXT ·q4PanelAVXVNNI(SB), NOSPLIT, $0-72
	VP_PROLOGUE(0x0f0f0f0f)
	VP_KERNEL(A_NEXT4, A4B1, A4B2, A4B3, A4B4, DP_VEX, 144, VP_DIV16, a4p, a4n1, a4n2, a4n3, a4n4, a4done, a4next)

// func q8PanelAVXVNNIEvex(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
TEXT ·q8PanelAVXVNNIEvex(SB), NOSPLIT, $0-72
	VP_PROLOGUE(0x80808080)
	VP_KERNEL(A_NEXT8, A8B1, A8B2, A8B3, A8B4, DP_EVEX, 272, VP_NOFIX, e8p, e8n1, e8n2, e8n3, e8n4, e8done, e8next)

// func q4PanelAVXVNNIEvex(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
TEXT ·q4PanelAVXVNNIEvex(SB), NOSPLIT, $0-72
	VP_PROLOGUE(0x0f0f0f0f)
	VP_KERNEL(A_NEXT4, A4B1, A4B2, A4B3, A4B4, DP_EVEX, 144, VP_DIV16, e4p, e4n1, e4n2, e4n3, e4n4, e4done, e4next)
