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
// The sums of a block and column start at the correction, -128·Σx (panelSums; for Q4_0 the sums
// are 16 times the products, see V4W in packed_vnni_amd64.h), and take the column's scale as a
// float32 from there too. The result is the exact integer Σ w·x for any
// activation quants (no intermediate saturates: |u·x| <= 255·128, four of them fit a dword), so
// for the [-127, 127] quants QuantizeAct writes it equals the AVX2 kernels' sum, and the float part
// below does the AVX2 kernels' operations in their order on the same values: the results are
// bit-identical.
//
// Only 256-bit registers (AVX512VL): on Zen 4 a 512-bit VPDPBUSD costs two 256-bit ones, and the
// 8-row layout gives one broadcast per column and 32-byte chunk. Registers as in
// packed_vnni_amd64.h, plus Y16-Y19: the columns' second integer sums.

// VZ_HI clears the second sums (EVEX: VEX cannot name Y16-Y19).
#define VZ_HI CLEAR4(VPXORD, Y16, Y17, Y18, Y19)

// VNEXT8 starts a Q8_0 block: the row scales, the odd-chunk sums at 0 (the even ones start at
// the corrections, VI8). VNEXT4, for Q4_0: the low-nibble sums at 0 (the high ones start at the
// corrections, VI4). The corrections are loaded for the columns in use only: a broadcast is a
// load, and the 1-column kernel has as many loads as it can issue.
#define VNEXT8 VCVTPH2PS (SI), Y7; VZ_HI
#define VNEXT4 VP_NEXT

#define VI8(I) I(Y8, Y9, Y10, Y11)
#define VI4H(I) I(Y16, Y17, Y18, Y19)

// V8X adds chunk c times column P's 4 activations (broadcast) to acc.
#define V8X(c, P, acc) VPDPBUSD.BCST 2+4*c(P), Y0, acc

#define V4X(c, P, acc, acc2) \
	VPDPBUSD.BCST 2+4*c(P), Y0, acc; \
	VPDPBUSD.BCST 18+4*c(P), Y1, acc2

// VFLOAT converts the block's integer sum acc and accumulates it into facc times the row scales
// (Y7) times the column's scale, the float32 at F (as PSCALE in packed_amd64.s, whose f16
// conversion gives the same float).
#define VFLOAT(F, acc, facc) \
	VCVTDQ2PS   acc, acc;      \
	VMULPS.BCST F, Y7, Y3;     \
	VFMADD231PS Y3, acc, facc

#define VSCALE8(F, acc, acc2, facc) SUM8(VFLOAT, F, acc, acc2, facc)
#define VSCALE4(F, acc, acc2, facc) SUM4(VFLOAT, F, acc, acc2, facc)

#define VS1(SC) SC(16(R9), Y8, Y16, Y12)
#define VS2(SC) VS1(SC); SC(20(R9), Y9, Y17, Y13)
#define VS3(SC) VS2(SC); SC(24(R9), Y10, Y18, Y14)
#define VS4(SC) VS3(SC); SC(28(R9), Y11, Y19, Y15)

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
// The 1-column blocks (decode, memory-bound: little work per byte) prefetch VPFD bytes ahead, a
// block's cache lines (4 of Q8_0's 272 bytes, 2 of Q4_0's 144; the hardware prefetchers fetch
// the rest of the stream): tinyllama Q4_0 tg32 61-66 t/s against 51-64 without (AMD EPYC Zen 5);
// 1024 bytes ahead did no better.
#define VPFD 2048
#define V8PF PREFETCHT0 VPFD(SI); PREFETCHT0 VPFD+64(SI); PREFETCHT0 VPFD+128(SI); PREFETCHT0 VPFD+192(SI)
#define V4PF PREFETCHT0 VPFD(SI); PREFETCHT0 VPFD+64(SI)

#define V8B1(DP) V8PF; VI8(VI1); V8BLOCK(V8C1); VS1(VSCALE8)
#define V8B2(DP) VI8(VI2); V8BLOCK(V8C2); VS2(VSCALE8)
#define V8B3(DP) VI8(VI3); V8BLOCK(V8C3); VS3(VSCALE8)
#define V8B4(DP) VI8(VI4); V8BLOCK(V8C4); VS4(VSCALE8)

#define V4B1(DP) V4PF; VI4H(VI1); V4BLOCK(V4C1); VS1(VSCALE4)
#define V4B2(DP) VI4H(VI2); V4BLOCK(V4C2); VS2(VSCALE4)
#define V4B3(DP) VI4H(VI3); V4BLOCK(V4C3); VS3(VSCALE4)
#define V4B4(DP) VI4H(VI4); V4BLOCK(V4C4); VS4(VSCALE4)

// func q8PanelVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// sums: panelSums with m = -128.
TEXT ·q8PanelVNNI(SB), NOSPLIT, $0-72
	VP_PROLOGUE(0x80808080)
	VP_KERNEL(VNEXT8, V8B1, V8B2, V8B3, V8B4, _, 272, VP_NOFIX, v8p, v8n1, v8n2, v8n3, v8n4, v8done, v8next)

// func q4PanelVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// sums: panelSums with m = -128.
TEXT ·q4PanelVNNI(SB), NOSPLIT, $0-72
	VP_PROLOGUE(0x0f0f0f0f)
	VP_KERNEL(VNEXT4, V4B1, V4B2, V4B3, V4B4, _, 144, VP_DIV16, v4p, v4n1, v4n2, v4n3, v4n4, v4done, v4next)
