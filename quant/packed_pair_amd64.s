#include "textflag.h"

// AVX2 kernels for packed Q8_0 and Q4_0 weights, two panels (16 rows) at once: the computation of
// packed_amd64.s (same integer sums, the same float operations in the same order on every row,
// so bit-identical results) with the registers blocked over 16 rows and the columns. The
// one-panel kernels load a column's broadcast activations for every chunk and panel; here a chunk
// fills a weight register of each panel (panel p at SI, p+1 at (SI)(R14*1)) and each broadcast
// feeds both, so a chunk of 4 columns costs 2 weight loads and 4 (Q4_0: 8) broadcasts for 8
// (Q4_0: 16) products instead of twice 1 and 4 (8).
//
// Sixteen ymm registers do not hold 8 integer sums, 8 float results, the weights and the
// constants: the float results live in the frame, 64j(SP) for column j of panel p and 64j+32(SP)
// for panel p+1, read, fused-multiply-added and written back once per block (one load and one
// store for every 8 or 4 chunks of work).
//
// np must be even (the Go side runs a last odd panel with the one-panel kernel).
// Registers: BX pairs left; CX blocks left; SI the block of panel p; R14 the bytes of one panel;
// DI, R10, R12, R13 columns 0-3 (R8 apart); R11 nx; DX out; R9 the block's activation sums
// (panelSums). Chunks: Y0-Y3 weights; Y4 broadcast activations; Q8_0: Y5, Y7 scratch and Y6
// int16 ones; Q4_0: Y5 the 0x0f bytes and Y6, Y7 scratch. Y8-Y11 and Y12-Y15: the integer sums
// of columns 0-3 for panels p and p+1. Block ends: Y0, Y1 the two panels' row scales, Y2-Y4 and
// Y7 (Q8_0: Y5) scratch, Q4_0's int16 ones in Y6.

#include "packed_amd64.h"

CONST4(pairOnes16<>, 0x00010001)

#define PP_PROLOGUE(bs) GROUP_ARGS(1, bs); PANEL_ARGS

// PP_PAIR starts a pair: the columns and sums from their start, the frame's results cleared.
#define PP_PAIR \
	VP_COLS;                 \
	VXORPS  Y0, Y0, Y0;      \
	VMOVUPS Y0, 0(SP);       \
	VMOVUPS Y0, 32(SP);      \
	VMOVUPS Y0, 64(SP);      \
	VMOVUPS Y0, 96(SP);      \
	VMOVUPS Y0, 128(SP);     \
	VMOVUPS Y0, 160(SP);     \
	VMOVUPS Y0, 192(SP);     \
	VMOVUPS Y0, 224(SP)

// PP_SCALES loads both panels' row scales of the block.
#define PP_SCALES VCVTPH2PS (SI), Y0; VCVTPH2PS (SI)(R14*1), Y1

// PP_FLOAT is PFLOAT for column j of both panels, with the results in the frame: facc +=
// float(acc) · (row scales · the column's scale), fa and fb scratch.
#define PP_FLOAT(j, a, b, fa, fb) \
	VBROADCASTSS 16+4*j(R9), Y2;     \
	VMULPS       Y0, Y2, Y3;         \
	VMULPS       Y1, Y2, Y2;         \
	VCVTDQ2PS    a, a;               \
	VCVTDQ2PS    b, b;               \
	VMOVUPS      64*j(SP), fa;       \
	VFMADD231PS  Y3, a, fa;          \
	VMOVUPS      fa, 64*j(SP);       \
	VMOVUPS      64*j+32(SP), fb;    \
	VFMADD231PS  Y2, b, fb;          \
	VMOVUPS      fb, 64*j+32(SP)

// Q8_0: chunk c's signed quants (Y2, Y3) and their magnitudes (Y0, Y1) for both panels; column
// P's activations take each panel's signs (packed_amd64.s's Q8X).
#define P8W(c) \
	VMOVDQU 16+32*c(SI), Y2;         \
	VMOVDQU 16+32*c(SI)(R14*1), Y3;  \
	VPABSB  Y2, Y0;                  \
	VPABSB  Y3, Y1

#define P8P(c, P) \
	VPBROADCASTD 2+4*c(P), Y4; \
	VPSIGNB      Y2, Y4, Y5;   \
	VPMADDUBSW   Y5, Y0, Y5;   \
	VPSIGNB      Y3, Y4, Y7;   \
	VPMADDUBSW   Y7, Y1, Y7

// P8X adds the products to the sums a, b; P8X0, for chunk 0, starts them (no clearing).
#define P8X(c, P, a, b) \
	P8P(c, P);              \
	VPMADDWD Y6, Y5, Y5;    \
	VPADDD   Y5, a, a;      \
	VPMADDWD Y6, Y7, Y7;    \
	VPADDD   Y7, b, b

#define P8X0(c, P, a, b) P8P(c, P); VPMADDWD Y6, Y5, a; VPMADDWD Y6, Y7, b

#define P8C1(X, c) P8W(c); X(c, DI, Y8, Y12)
#define P8C2(X, c) P8C1(X, c); X(c, R10, Y9, Y13)
#define P8C3(X, c) P8C2(X, c); X(c, R12, Y10, Y14)
#define P8C4(X, c) P8C3(X, c); X(c, R13, Y11, Y15)

#define P8F(j, a, b) PP_FLOAT(j, a, b, Y4, Y5)
#define P8S1 PP_SCALES; P8F(0, Y8, Y12)
#define P8S2 P8S1; P8F(1, Y9, Y13)
#define P8S3 P8S2; P8F(2, Y10, Y14)
#define P8S4 P8S3; P8F(3, Y11, Y15)

#define P8B(C, S) C(P8X0, 0); C(P8X, 1); C(P8X, 2); C(P8X, 3); C(P8X, 4); C(P8X, 5); C(P8X, 6); C(P8X, 7); S; VP_ADVANCE(272)

// Q4_0: chunk c's low nibbles (Y0, Y2: elements 4c..) and high ones (Y1, Y3: 16+4c..) for both
// panels; column P's raw products into the 16-bit sums (packed_amd64.s's Q4X).
#define P4W(c) \
	VMOVDQU 16+32*c(SI), Y0;        \
	VMOVDQU 16+32*c(SI)(R14*1), Y2; \
	VPSRLW  $4, Y0, Y1;             \
	VPSRLW  $4, Y2, Y3;             \
	VPAND   Y5, Y0, Y0;             \
	VPAND   Y5, Y1, Y1;             \
	VPAND   Y5, Y2, Y2;             \
	VPAND   Y5, Y3, Y3

#define P4HI(c, P, a, b) \
	VPBROADCASTD 18+4*c(P), Y4; \
	VPMADDUBSW   Y4, Y1, Y6;    \
	VPADDW       Y6, a, a;      \
	VPMADDUBSW   Y4, Y3, Y7;    \
	VPADDW       Y7, b, b

// P4X adds the products to the sums a, b; P4X0, for chunk 0, starts them (no clearing).
#define P4X(c, P, a, b) \
	VPBROADCASTD 2+4*c(P), Y4; \
	VPMADDUBSW   Y4, Y0, Y6;   \
	VPADDW       Y6, a, a;     \
	VPMADDUBSW   Y4, Y2, Y7;   \
	VPADDW       Y7, b, b;     \
	P4HI(c, P, a, b)

#define P4X0(c, P, a, b) \
	VPBROADCASTD 2+4*c(P), Y4; \
	VPMADDUBSW   Y4, Y0, a;    \
	VPMADDUBSW   Y4, Y2, b;    \
	P4HI(c, P, a, b)

#define P4C1(X, c) P4W(c); X(c, DI, Y8, Y12)
#define P4C2(X, c) P4C1(X, c); X(c, R10, Y9, Y13)
#define P4C3(X, c) P4C2(X, c); X(c, R12, Y10, Y14)
#define P4C4(X, c) P4C3(X, c); X(c, R13, Y11, Y15)

// P4F is Q4SCALE for column j of both panels: widen, subtract 8·Σx, then PP_FLOAT.
#define P4F(j, a, b) \
	VPMADDWD     Y6, a, a;   \
	VPMADDWD     Y6, b, b;   \
	VPBROADCASTD 4*j(R9), Y2; \
	VPSUBD       Y2, a, a;   \
	VPSUBD       Y2, b, b;   \
	PP_FLOAT(j, a, b, Y4, Y7)

#define P4S1 PP_SCALES; VPBROADCASTD pairOnes16<>(SB), Y6; P4F(0, Y8, Y12)
#define P4S2 P4S1; P4F(1, Y9, Y13)
#define P4S3 P4S2; P4F(2, Y10, Y14)
#define P4S4 P4S3; P4F(3, Y11, Y15)

#define P4B(C, S) C(P4X0, 0); C(P4X, 1); C(P4X, 2); C(P4X, 3); S; VP_ADVANCE(144)

// PP_END loads the frame's results: panel p's into Y8-Y11 (PANEL_STORE stores them), panel
// p+1's into Y12-Y15, stored 32 bytes after them for the nx columns.
#define PP_END(done) \
	VMOVUPS 0(SP), Y8;                \
	VMOVUPS 64(SP), Y9;               \
	VMOVUPS 128(SP), Y10;             \
	VMOVUPS 192(SP), Y11;             \
	VMOVUPS 32(SP), Y12;              \
	VMOVUPS 96(SP), Y13;              \
	VMOVUPS 160(SP), Y14;             \
	VMOVUPS 224(SP), Y15;             \
	PANEL_STORE_AT(32, Y12, Y13, Y14, Y15, done); \
done:

#define PP_LOOPS(S1, S2, S3, S4, lhi, lp, l1, l2, l3, l4, ldone, lnext) \
	PANEL_LOOPS(PP_PAIR, S1, S2, S3, S4, PP_END(lhi), Y8, Y9, Y10, Y11, ZP_STEP, lp, l1, l2, l3, l4, ldone, lnext)

// func q8Panel2AVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// np even; sums: panelSums with m = 0 (only the scales are read).
TEXT ·q8Panel2AVX2(SB), NOSPLIT, $256-72
	PP_PROLOGUE(34)
	BCAST32(0x00010001, X6, Y6)
	PP_LOOPS(P8B(P8C1, P8S1), P8B(P8C2, P8S2), P8B(P8C3, P8S3), P8B(P8C4, P8S4), p8hi, p8p, p8n1, p8n2, p8n3, p8n4, p8done, p8next)

// func q4Panel2AVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// np even; sums: panelSums with m = 8.
TEXT ·q4Panel2AVX2(SB), NOSPLIT, $256-72
	PP_PROLOGUE(18)
	BCAST32(0x0f0f0f0f, X5, Y5)
	PP_LOOPS(P4B(P4C1, P4S1), P4B(P4C2, P4S2), P4B(P4C3, P4S3), P4B(P4C4, P4S4), p4hi, p4p, p4n1, p4n2, p4n3, p4n4, p4done, p4next)
