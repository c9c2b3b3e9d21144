#include "textflag.h"
#include "packed_vnni_amd64.h"

// AVX-VNNI kernels for packed Q8_0 and Q4_0 weights: the AVX-512 VNNI kernels'
// (packed_vnni_amd64.s) computation with only VEX encodings, for CPUs with AVX-VNNI and no
// AVX-512. Same operands and sums (sums[4b+j] = 128·Σx for Q8_0, 8·Σx for Q4_0), so the same
// exactness and bit-identical results; but no embedded broadcasts (the activations go through
// Y2-Y3) and no Y16-Y31 (one integer sum per column).
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

// A8X adds Q8_0 chunk c (Y0) times column P's 4 activations to acc.
#define A8X(c, P, acc, a, DP) \
	VPBROADCASTD 2+4*c(P), Y2; \
	DP(acc, a, Y0, 0, Y2, 2)

// A4X adds Q4_0 chunk c (Y0 low, Y1 high nibbles) times column P's activations to acc.
#define A4X(c, P, acc, a, DP) \
	VPBROADCASTD 2+4*c(P), Y2;  \
	DP(acc, a, Y0, 0, Y2, 2);   \
	VPBROADCASTD 18+4*c(P), Y3; \
	DP(acc, a, Y1, 1, Y3, 3)

// ASCALE subtracts the correction at S from acc and scales it into facc (as VSCALE).
#define ASCALE(P, S, acc, facc) \
	VPBROADCASTD S, Y3;       \
	VPSUBD       Y3, acc, acc; \
	VCVTDQ2PS    acc, acc;    \
	VPBROADCASTW (P), X3;     \
	VCVTPH2PS    X3, Y3;      \
	VMULPS       Y7, Y3, Y3;  \
	VFMADD231PS  Y3, acc, facc

#define AS1 ASCALE(DI, 0(R9), Y8, Y12)
#define AS2 AS1; ASCALE(R10, 4(R9), Y9, Y13)
#define AS3 AS2; ASCALE(R12, 8(R9), Y10, Y14)
#define AS4 AS3; ASCALE(R13, 12(R9), Y11, Y15)

#define A8C1(c, DP) V8W(c); A8X(c, DI, Y8, 8, DP)
#define A8C2(c, DP) A8C1(c, DP); A8X(c, R10, Y9, 9, DP)
#define A8C3(c, DP) A8C2(c, DP); A8X(c, R12, Y10, 10, DP)
#define A8C4(c, DP) A8C3(c, DP); A8X(c, R13, Y11, 11, DP)

#define A8BLOCK(C, DP) C(0, DP); C(1, DP); C(2, DP); C(3, DP); C(4, DP); C(5, DP); C(6, DP); C(7, DP)

#define A4C1(c, DP) V4W(c); A4X(c, DI, Y8, 8, DP)
#define A4C2(c, DP) A4C1(c, DP); A4X(c, R10, Y9, 9, DP)
#define A4C3(c, DP) A4C2(c, DP); A4X(c, R12, Y10, 10, DP)
#define A4C4(c, DP) A4C3(c, DP); A4X(c, R13, Y11, 11, DP)

#define A4BLOCK(C, DP) C(0, DP); C(1, DP); C(2, DP); C(3, DP)

#define A8B1(DP) A8BLOCK(A8C1, DP); AS1
#define A8B2(DP) A8BLOCK(A8C2, DP); AS2
#define A8B3(DP) A8BLOCK(A8C3, DP); AS3
#define A8B4(DP) A8BLOCK(A8C4, DP); AS4

#define A4B1(DP) A4BLOCK(A4C1, DP); AS1
#define A4B2(DP) A4BLOCK(A4C2, DP); AS2
#define A4B3(DP) A4BLOCK(A4C3, DP); AS3
#define A4B4(DP) A4BLOCK(A4C4, DP); AS4

#define A8NEXT VP_NEXT(V8_LINES)
#define A4NEXT VP_NEXT(V4_LINES)

// func q8PanelAVXVNNI(nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
TEXT ·q8PanelAVXVNNI(SB), NOSPLIT, $0-64
	VP_PROLOGUE(8, 0x80808080)
	VP_KERNEL(A8NEXT, A8B1, A8B2, A8B3, A8B4, DP_VEX, 256, a8n1, a8n2, a8n3, a8n4, a8done, a8ret)

// func q4PanelAVXVNNI(nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
TEXT ·q4PanelAVXVNNI(SB), NOSPLIT, $0-64
	VP_PROLOGUE(7, 0x0f0f0f0f)
	VP_KERNEL(A4NEXT, A4B1, A4B2, A4B3, A4B4, DP_VEX, 128, a4n1, a4n2, a4n3, a4n4, a4done, a4ret)

// func q8PanelAVXVNNIEvex(nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
TEXT ·q8PanelAVXVNNIEvex(SB), NOSPLIT, $0-64
	VP_PROLOGUE(8, 0x80808080)
	VP_KERNEL(A8NEXT, A8B1, A8B2, A8B3, A8B4, DP_EVEX, 256, e8n1, e8n2, e8n3, e8n4, e8done, e8ret)

// func q4PanelAVXVNNIEvex(nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
TEXT ·q4PanelAVXVNNIEvex(SB), NOSPLIT, $0-64
	VP_PROLOGUE(7, 0x0f0f0f0f)
	VP_KERNEL(A4NEXT, A4B1, A4B2, A4B3, A4B4, DP_EVEX, 128, e4n1, e4n2, e4n3, e4n4, e4done, e4ret)
