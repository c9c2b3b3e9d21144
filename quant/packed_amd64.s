#include "textflag.h"

// Kernels for packed Q4_0 and Q8_0 weights (see packed.go for the panel layout): 8 rows times nx
// (1..4) columns of Q8_0 activations. A block's chunk holds the same 4 elements of the 8 rows, one
// row per dword lane, so each column's products accumulate vertically: per block and column the
// integer sums of the 8 rows sit in one register, converted once and fused-multiply-added with
// the 8 rows' scales times the column's scale. Each chunk is decoded once for all nx columns.
// These run decode (one column) and a last odd panel; packed_pair_amd64.s runs pairs of panels
// for 2-4 columns, bit-identical to these (the tests' reference).
//
// Registers: the frame's (packed_amd64.h), with Y6 int16 ones.
//
// Exactness: as the single-row kernels, exact integer sums for activation quants in [-127, 127].
// Q4_0 sums of 8 chunks stay in 16 bits: |q·x + q'·x'| <= 2·15·128 per lane and chunk.

#include "packed_amd64.h"

// PANEL_PROLOGUE loads the arguments and the constants.
#define PANEL_PROLOGUE \
	VP_PROLOGUE(0x0f0f0f0f); \
	BCAST32(0x00010001, X6, Y6)

// Q8W(c) loads Q8_0 chunk c: Y0 = signed quants, Y1 = |quants| (-128 becomes unsigned 128).
#define Q8W(c) \
	VMOVDQU 16+32*c(SI), Y0; \
	VPABSB  Y0, Y1

// Q8X adds chunk c times column P's 4 activations to acc: the activations take the weights' signs
// so that vpmaddubsw multiplies unsigned |w| by signed ±x.
#define Q8X(c, P, acc) \
	VPBROADCASTD 2+4*c(P), Y2; \
	VPSIGNB      Y0, Y2, Y2;   \
	VPMADDUBSW   Y2, Y1, Y2;   \
	VPMADDWD     Y6, Y2, Y2;   \
	VPADDD       Y2, acc, acc

// Q4W(c) decodes Q4_0 chunk c: Y0 = low nibbles (elements 4c..), Y1 = high nibbles (16+4c..).
#define Q4W(c) \
	VMOVDQU 16+32*c(SI), Y0; \
	VPSRLW  $4, Y0, Y1;   \
	VPAND   Y5, Y0, Y0;   \
	VPAND   Y5, Y1, Y1

// Q4X adds the raw nibbles q of chunk c times column P's activations to the 16-bit sums in acc.
#define Q4X(c, P, acc) \
	VPBROADCASTD 2+4*c(P), Y2;  \
	VPMADDUBSW   Y2, Y0, Y2;    \
	VPADDW       Y2, acc, acc;  \
	VPBROADCASTD 18+4*c(P), Y3; \
	VPMADDUBSW   Y3, Y1, Y3;    \
	VPADDW       Y3, acc, acc

// PFLOAT converts the block's integer sums in acc and accumulates them into facc times the row
// scales (Y7) times the column's scale, the float32 at F (panelSums).
#define PFLOAT(F, acc, facc) \
	VCVTDQ2PS    acc, acc;   \
	VBROADCASTSS F, Y3;      \
	VMULPS       Y7, Y3, Y3; \
	VFMADD231PS  Y3, acc, facc

// Q4SCALE widens the 16-bit sums, subtracts 8·Σx (the int32 at S: q-8 is the weight), then
// PFLOAT.
#define Q4SCALE(S, F, acc, facc) \
	VPMADDWD     Y6, acc, acc; \
	VPBROADCASTD S, Y2;        \
	VPSUBD       Y2, acc, acc; \
	PFLOAT(F, acc, facc)

// Column sets: chunk c for the first n columns.
#define Q8C1(c) Q8W(c); Q8X(c, DI, Y8)
#define Q8C2(c) Q8C1(c); Q8X(c, R10, Y9)
#define Q8C3(c) Q8C2(c); Q8X(c, R12, Y10)
#define Q8C4(c) Q8C3(c); Q8X(c, R13, Y11)

#define Q8BLOCK(C) C(0); C(1); C(2); C(3); C(4); C(5); C(6); C(7)

#define Q8S1 PFLOAT(16(R9), Y8, Y12)
#define Q8S2 Q8S1; PFLOAT(20(R9), Y9, Y13)
#define Q8S3 Q8S2; PFLOAT(24(R9), Y10, Y14)
#define Q8S4 Q8S3; PFLOAT(28(R9), Y11, Y15)

#define Q4C1(c) Q4W(c); Q4X(c, DI, Y8)
#define Q4C2(c) Q4C1(c); Q4X(c, R10, Y9)
#define Q4C3(c) Q4C2(c); Q4X(c, R12, Y10)
#define Q4C4(c) Q4C3(c); Q4X(c, R13, Y11)

#define Q4BLOCK(C) C(0); C(1); C(2); C(3)

#define Q4S1 Q4SCALE(0(R9), 16(R9), Y8, Y12)
#define Q4S2 Q4S1; Q4SCALE(4(R9), 20(R9), Y9, Y13)
#define Q4S3 Q4S2; Q4SCALE(8(R9), 24(R9), Y10, Y14)
#define Q4S4 Q4S3; Q4SCALE(12(R9), 28(R9), Y11, Y15)

// Blocks for n columns (VP_KERNEL's Bn; the product macro is not used).
#define Q8B1(DP) Q8BLOCK(Q8C1); Q8S1
#define Q8B2(DP) Q8BLOCK(Q8C2); Q8S2
#define Q8B3(DP) Q8BLOCK(Q8C3); Q8S3
#define Q8B4(DP) Q8BLOCK(Q8C4); Q8S4

#define Q4B1(DP) Q4BLOCK(Q4C1); Q4S1
#define Q4B2(DP) Q4BLOCK(Q4C2); Q4S2
#define Q4B3(DP) Q4BLOCK(Q4C3); Q4S3
#define Q4B4(DP) Q4BLOCK(Q4C4); Q4S4

// func q8PanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// sums: panelSums with m = 0 (only the scales are read).
TEXT ·q8PanelAVX2(SB), NOSPLIT, $0-72
	PANEL_PROLOGUE
	VP_KERNEL(VP_NEXT, Q8B1, Q8B2, Q8B3, Q8B4, _, 272, VP_NOFIX, q8p, q8n1, q8n2, q8n3, q8n4, q8done, q8next)

// func q4PanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// sums: panelSums with m = 8.
TEXT ·q4PanelAVX2(SB), NOSPLIT, $0-72
	PANEL_PROLOGUE
	VP_KERNEL(VP_NEXT, Q4B1, Q4B2, Q4B3, Q4B4, _, 144, VP_NOFIX, q4p, q4n1, q4n2, q4n3, q4n4, q4done, q4next)
