#include "textflag.h"
#include "packed_vnni_amd64.h"

// AVX-512 VNNI kernels for packed Q8_0 and Q4_0 weights (panel layout in packed.go; the AVX2
// versions, whose structure these follow, are in packed_amd64.s): 8 rows times nx (1..4) columns
// of Q8_0 activations. VPDPBUSD multiplies 4 unsigned bytes by 4 signed bytes and adds the four
// products to a dword, so one instruction per chunk and column replaces AVX2's VPSIGNB,
// VPMADDUBSW, VPMADDWD and VPADDD; the column's 4 activation bytes come straight from memory as an
// embedded broadcast. The weights must be the unsigned operand:
//
//	Q8_0: u = w+128 (w XOR 0x80), so Σ u·x = Σ w·x + 128·Σx;
//	Q4_0: u = the raw nibble q (the weight is q-8), so Σ u·x = Σ (q-8)·x + 8·Σx.
//
// sums[4b+j] holds the correction (128·Σx or 8·Σx of block b of column j, see vnniSums), which
// is subtracted once per block and column. The result is the exact integer Σ w·x for any
// activation quants (no intermediate saturates: |u·x| <= 255·128, four of them fit a dword), so
// for the [-127, 127] quants QuantizeAct writes it equals the AVX2 kernels' sum, and the float part
// below is the AVX2 kernels' instruction for instruction: the results are bit-identical.
//
// Only 256-bit registers (AVX512VL): on Zen 4 a 512-bit VPDPBUSD costs two 256-bit ones, and the
// 8-row layout gives one broadcast per column and 32-byte chunk. Registers as in
// packed_vnni_amd64.h, plus Y16-Y19: the columns' second integer sums.

// VZ_HI clears the second sums (EVEX: VEX cannot name Y16-Y19).
#define VZ_HI \
	VPXORD Y16, Y16, Y16; \
	VPXORD Y17, Y17, Y17; \
	VPXORD Y18, Y18, Y18; \
	VPXORD Y19, Y19, Y19

#define VNEXT VP_NEXT; VZ_HI

// V8X adds chunk c times column P's 4 activations (broadcast) to acc.
#define V8X(c, P, acc) VPDPBUSD.BCST 2+4*c(P), Y0, acc

#define V4X(c, P, acc, acc2) \
	VPDPBUSD.BCST 2+4*c(P), Y0, acc; \
	VPDPBUSD.BCST 18+4*c(P), Y1, acc2

// VFLOAT converts the block's integer sum acc and accumulates it into facc times the row scales
// (Y7) times column P's scale (as PSCALE in packed_amd64.s).
#define VFLOAT(P, acc, facc) \
	VCVTDQ2PS    acc, acc;   \
	VPBROADCASTW (P), X3;    \
	VCVTPH2PS    X3, Y3;     \
	VMULPS       Y7, Y3, Y3; \
	VFMADD231PS  Y3, acc, facc

// VSCALE8 (Q8_0) adds the block's two sums acc and acc2 and subtracts the correction at S;
// VSCALE4 (Q4_0) subtracts it from the low-nibble sum acc and adds the high one, 16 times as
// large, to 16 times that (see V4W). Then VFLOAT.
#define VSCALE8(P, S, acc, acc2, facc) \
	VPADDD      acc2, acc, acc; \
	VPSUBD.BCST S, acc, acc;    \
	VFLOAT(P, acc, facc)

#define VSCALE4(P, S, acc, acc2, facc) \
	VPSUBD.BCST S, acc, acc;    \
	VPSLLD      $4, acc, acc;   \
	VPADDD      acc2, acc, acc; \
	VFLOAT(P, acc, facc)

#define VS1(SC) SC(DI, 0(R9), Y8, Y16, Y12)
#define VS2(SC) VS1(SC); SC(R10, 4(R9), Y9, Y17, Y13)
#define VS3(SC) VS2(SC); SC(R12, 8(R9), Y10, Y18, Y14)
#define VS4(SC) VS3(SC); SC(R13, 12(R9), Y11, Y19, Y15)

// Column sets: chunk c for the first n columns. Two sums per column (Y8-Y11 and Y16-Y19: even and
// odd Q8_0 chunks, low and high Q4_0 nibbles) halve the chains of dependent VPDPBUSDs.
#define V8C1(c, a0, a1, a2, a3) V8W(c); V8X(c, DI, a0)
#define V8C2(c, a0, a1, a2, a3) V8C1(c, a0, a1, a2, a3); V8X(c, R10, a1)
#define V8C3(c, a0, a1, a2, a3) V8C2(c, a0, a1, a2, a3); V8X(c, R12, a2)
#define V8C4(c, a0, a1, a2, a3) V8C3(c, a0, a1, a2, a3); V8X(c, R13, a3)

#define V8E(C, c) C(c, Y8, Y9, Y10, Y11)
#define V8O(C, c) C(c, Y16, Y17, Y18, Y19)
#define V8BLOCK(C) V8E(C, 0); V8O(C, 1); V8E(C, 2); V8O(C, 3); V8E(C, 4); V8O(C, 5); V8E(C, 6); V8O(C, 7)

#define V4C1(c) V4W(c); V4X(c, DI, Y8, Y16)
#define V4C2(c) V4C1(c); V4X(c, R10, Y9, Y17)
#define V4C3(c) V4C2(c); V4X(c, R12, Y10, Y18)
#define V4C4(c) V4C3(c); V4X(c, R13, Y11, Y19)

#define V4BLOCK(C) C(0); C(1); C(2); C(3)

// Blocks for n columns (VP_KERNEL's Bn; the product macro is not needed: V8X and V4X are EVEX).
#define V8B1(DP) V8BLOCK(V8C1); VS1(VSCALE8)
#define V8B2(DP) V8BLOCK(V8C2); VS2(VSCALE8)
#define V8B3(DP) V8BLOCK(V8C3); VS3(VSCALE8)
#define V8B4(DP) V8BLOCK(V8C4); VS4(VSCALE8)

#define V4B1(DP) V4BLOCK(V4C1); VS1(VSCALE4)
#define V4B2(DP) V4BLOCK(V4C2); VS2(VSCALE4)
#define V4B3(DP) V4BLOCK(V4C3); VS3(VSCALE4)
#define V4B4(DP) V4BLOCK(V4C4); VS4(VSCALE4)

// func q8PanelVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// sums[4b+j] = 128·Σ of the quants of block b of column j.
TEXT ·q8PanelVNNI(SB), NOSPLIT, $0-72
	VP_PROLOGUE(0x80808080)
	VP_KERNEL(VNEXT, V8B1, V8B2, V8B3, V8B4, _, 272, VP_NOFIX, v8p, v8n1, v8n2, v8n3, v8n4, v8done, v8next)

// func q4PanelVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// sums[4b+j] = 8·Σ of the quants of block b of column j (q4SumsAVX2).
TEXT ·q4PanelVNNI(SB), NOSPLIT, $0-72
	VP_PROLOGUE(0x0f0f0f0f)
	VP_KERNEL(VNEXT, V4B1, V4B2, V4B3, V4B4, _, 144, VP_DIV16, v4p, v4n1, v4n2, v4n3, v4n4, v4done, v4next)
