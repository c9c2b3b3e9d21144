#include "textflag.h"
#include "packed_vnni_amd64.h"

// AVX-512 VNNI kernels for packed Q8_0 and Q4_0 weights on 512-bit registers: the computation of
// packed_vnni_amd64.s (same sums, same corrections, the same float operations in the same order
// on every row, so bit-identical results) for two panels at once. Lanes 0-7 of a zmm are panel
// p's 8 rows, lanes 8-15 panel p+1's: a chunk is the 32 bytes of panel p (a load) and the 32 of
// panel p+1 one panel further on (an insert from memory), and one VPDPBUSD with a {1to16}
// broadcast of a column's 4 activations multiplies both. A 512-bit VPDPBUSD does twice the
// multiply-adds of a 256-bit one at the same throughput on the Intel Xeons with two 512-bit
// units (ubatch bench --peak), and the per-block work of a column (the sums, the scaling) is
// shared by 16 rows instead of 8. The 16 outputs of a pair are contiguous (panel p+1's rows follow
// panel p's), so one store writes them.
//
// np must be even (the Go side runs an odd last panel with the 256-bit kernel). With two columns
// or more the Go side gives these kernels only what the four-panel kernels of
// packed_vnni512q_amd64.s leave (np mod 4); decode (one column) runs the one-panel kernels, a
// single stream of the weights. The prefetch of the one- and two-column blocks (ZPF) serves the
// tests' and the fuzzers' direct calls and the two-column remainders.
// Registers:
// BX pairs left; CX blocks left; SI the block of panel p, R14 the bytes of one panel (panel p+1's
// block at (SI)(R14*1)); DI, R10, R12, R13 columns 0-3 (R8 apart); R11 nx; DX out; R9 the
// block's activation sums (the corrections at 4j(R9), the scales at 16+4j(R9)); Z5 the 0x80 or
// 0x0f bytes; Z0-Z1 weights; Z3 scratch; Z7 the 16 row scales; Z8-Z11 and Z16-Z19 the columns'
// two integer sums; Z12-Z15 their results.

#define ZP_PROLOGUE(mask, bs) \
	GROUP_ARGS(1, bs);     \
	PANEL_ARGS;            \
	MOVL         $mask, AX; \
	VPBROADCASTD AX, Z5

// ZP_PAIR starts a pair of panels as VP_PANEL starts one.
#define ZP_PAIR VP_COLS; CLEAR4(VPXORD, Z12, Z13, Z14, Z15)

// ZSCALES loads the 16 rows' f16 scales of the block: panel p's 8 then panel p+1's.
#define ZSCALES \
	VMOVDQU     (SI), X7;                \
	VINSERTI128 $1, (SI)(R14*1), Y7, Y7; \
	VCVTPH2PS   Y7, Z7

// ZLOAD(off, Z) loads the 32 bytes at off of both panels' blocks into Z.
#define ZLOAD(off, Zr, Yr) \
	VMOVDQU       off(SI), Yr; \
	VINSERTI64X4  $1, off(SI)(R14*1), Zr, Zr

// Q8_0: chunk c as unsigned w+128, times column P's activations.
#define Z8W(c) ZLOAD(16+32*c, Z0, Y0); VPXORD Z5, Z0, Z0
#define Z8X(c, P, acc) VPDPBUSD.BCST 2+4*c(P), Z0, acc

#define Z8C1(c, a0, a1, a2, a3) Z8W(c); Z8X(c, DI, a0)
#define Z8C2(c, a0, a1, a2, a3) Z8C1(c, a0, a1, a2, a3); Z8X(c, R10, a1)
#define Z8C3(c, a0, a1, a2, a3) Z8C2(c, a0, a1, a2, a3); Z8X(c, R12, a2)
#define Z8C4(c, a0, a1, a2, a3) Z8C3(c, a0, a1, a2, a3); Z8X(c, R13, a3)

#define Z8E(C, c) C(c, Z8, Z9, Z10, Z11)
#define Z8O(C, c) C(c, Z16, Z17, Z18, Z19)
#define Z8BLOCK(C) Z8E(C, 0); Z8O(C, 1); Z8E(C, 2); Z8O(C, 3); Z8E(C, 4); Z8O(C, 5); Z8E(C, 6); Z8O(C, 7)

// Q4_0: chunk c's low nibbles (Z0) and high nibbles in place, 16 times (Z1), as V4W.
#define Z4W(c) \
	ZLOAD(16+32*c, Z1, Y1); \
	VPANDD  Z5, Z1, Z0;     \
	VPANDND Z1, Z5, Z1

#define Z4X(c, P, acc, acc2) \
	VPDPBUSD.BCST 2+4*c(P), Z0, acc; \
	VPDPBUSD.BCST 18+4*c(P), Z1, acc2

#define Z4C1(c) Z4W(c); Z4X(c, DI, Z8, Z16)
#define Z4C2(c) Z4C1(c); Z4X(c, R10, Z9, Z17)
#define Z4C3(c) Z4C2(c); Z4X(c, R12, Z10, Z18)
#define Z4C4(c) Z4C3(c); Z4X(c, R13, Z11, Z19)
#define Z4BLOCK(C) C(0); C(1); C(2); C(3)

// ZFLOAT: facc += float(acc) · (row scales · the column's scale at F), as VFLOAT.
#define ZFLOAT(F, acc, facc) \
	VCVTDQ2PS   acc, acc;  \
	VMULPS.BCST F, Z7, Z3; \
	VFMADD231PS Z3, acc, facc

#define ZSCALE8(F, acc, acc2, facc) SUM8(ZFLOAT, F, acc, acc2, facc)
#define ZSCALE4(F, acc, acc2, facc) SUM4(ZFLOAT, F, acc, acc2, facc)

#define ZS1(SC) SC(16(R9), Z8, Z16, Z12)
#define ZS2(SC) ZS1(SC); SC(20(R9), Z9, Z17, Z13)
#define ZS3(SC) ZS2(SC); SC(24(R9), Z10, Z18, Z14)
#define ZS4(SC) ZS3(SC); SC(28(R9), Z11, Z19, Z15)

// Blocks for n columns. Q8_0: the even chunks' sums start at the corrections, the odd ones at 0;
// Q4_0: the low nibbles' at 0, the high ones' at the corrections.
// ZPF prefetches both panels' bytes ZPFD ahead (two cache lines of each, about a block), so that
// the loads of decode (one or two columns: little work per byte) find them in cache; with three or
// four columns a pass is compute-bound and the prefetches only took issue slots. Measured on an
// AMD EPYC Zen 5: tinyllama Q4_0 tg64 40-43 t/s without, 48-54 with (by CPU time, 3 rounds);
// 1024 and 4096 bytes ahead did less than 2048.
#define ZPFD 2048
#define ZPF \
	PREFETCHT0 ZPFD(SI);            \
	PREFETCHT0 ZPFD+64(SI);         \
	PREFETCHT0 ZPFD(SI)(R14*1);     \
	PREFETCHT0 ZPFD+64(SI)(R14*1)

#define Z8B(I, C, S) ZSCALES; CLEAR4(VPXORD, Z16, Z17, Z18, Z19); I(Z8, Z9, Z10, Z11); Z8BLOCK(C); S(ZSCALE8); VP_ADVANCE(272)
#define Z4B(I, C, S) ZSCALES; CLEAR4(VPXORD, Z8, Z9, Z10, Z11); I(Z16, Z17, Z18, Z19); Z4BLOCK(C); S(ZSCALE4); VP_ADVANCE(144)

// Z8BP and Z4BP are Z8B and Z4B with the prefetch (the one- and two-column blocks).
#define Z8BP(I, C, S) ZPF; Z8B(I, C, S)
#define Z4BP(I, C, S) ZPF; Z4B(I, C, S)

// ZDIV16 divides the Q4_0 results by 16 (see V4W in packed_vnni_amd64.h).
#define ZDIV16 \
	MOVL         $0x3d800000, AX; \
	VPBROADCASTD AX, Z0;          \
	VMULPS       Z0, Z12, Z12;    \
	VMULPS       Z0, Z13, Z13;    \
	VMULPS       Z0, Z14, Z14;    \
	VMULPS       Z0, Z15, Z15

// ZP_LOOPS: PANEL_LOOPS over pairs of panels, the results in Z12-Z15.
#define ZP_LOOPS(S1, S2, S3, S4, FIX, lp, l1, l2, l3, l4, ldone, lnext) \
	PANEL_LOOPS(ZP_PAIR, S1, S2, S3, S4, FIX, Z12, Z13, Z14, Z15, ZP_STEP, lp, l1, l2, l3, l4, ldone, lnext)

// func q8Panel2VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// np even; sums: panelSums with m = -128.
TEXT ·q8Panel2VNNI(SB), NOSPLIT, $0-72
	ZP_PROLOGUE(0x80808080, 34)
	ZP_LOOPS(Z8BP(VI1, Z8C1, ZS1), Z8BP(VI2, Z8C2, ZS2), Z8B(VI3, Z8C3, ZS3), Z8B(VI4, Z8C4, ZS4), VP_NOFIX, z8p, z8n1, z8n2, z8n3, z8n4, z8done, z8next)

// func q4Panel2VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// np even; sums: panelSums with m = -128.
TEXT ·q4Panel2VNNI(SB), NOSPLIT, $0-72
	ZP_PROLOGUE(0x0f0f0f0f, 18)
	ZP_LOOPS(Z4BP(VI1, Z4C1, ZS1), Z4BP(VI2, Z4C2, ZS2), Z4B(VI3, Z4C3, ZS3), Z4B(VI4, Z4C4, ZS4), ZDIV16, z4p, z4n1, z4n2, z4n3, z4n4, z4done, z4next)
