#include "textflag.h"

// The AVX2 kernel for packed MXFP4 weights (see packed.go for the panel layout: a block's 8 scale
// bytes, then Q4_0's four chunks of nibbles): 8 rows times nx (1..4) columns of Q8_0
// activations, built like q4PanelAVX2 (packed_amd64.s). The nibbles are looked up in the E2M1
// table (values doubled, as ggml keeps them, in [-12, 12]) plus 12, so that vpmaddubsw takes them
// unsigned as it takes Q4_0's nibbles, and 12·Σx (panelSums with m = 12) is subtracted per block.
// Two chunks are decoded at a time so that each column adds four products in 16 bits before one
// widening. (A first version multiplied |w| by sign-adjusted activations, as the row kernels do:
// 13-20% slower, 80 against 93 GFLOP/s for one token, 133 against 161 for four, in
// BenchmarkMatMulPacked on an AMD EPYC Zen 3.)
//
// Registers: the frame's (packed_amd64.h), but Y5 and Y6 hold the second chunk (the mask and the
// int16 ones are read from memory), Y4 the table, Y0/Y1 the first chunk, Y2-Y3 scratch.
//
// Exactness: exact integer sums for activation quants in [-127, 127]: a column's 16-bit sum of
// two chunks is four pair sums of at most 2·24·127 (24384 in all). The row scales 2^(e-128) are
// made exactly (MXNEXT), so the kernel differs from its Go twin only in the float32 rounding of
// the fused multiply-add.

#include "packed_amd64.h"

// MXNEXT starts a block: the 8 rows' scales 2^(e-128) as float32 into Y7 (the float bits
// (e-1)<<23, or the subnormal 0x00200000<<e for e < 2, chosen by the sign of (e-2)<<23; as
// dot_q32_amd64.s's E8M0HALF4), and the integer sums cleared.
#define MXNEXT \
	VPMOVZXBD (SI), Y7;             \
	VPSLLD    $23, Y7, Y8;          \
	VPSUBD    ·e8m0two(SB), Y8, Y8; \
	VPADDD    ·e8m0one(SB), Y8, Y9; \
	VMOVDQU   ·e8m0sub(SB), Y10;    \
	VPSLLVD   Y7, Y10, Y10;         \
	VBLENDVPS Y8, Y10, Y9, Y7;      \
	CLEAR4(VPXOR, Y8, Y9, Y10, Y11)

// mxfp4u is kvalues_mxfp4 plus 12 (so that vpmaddubsw takes the weights unsigned, in [0, 24]) in
// both lanes: 12 13 14 15 16 18 20 24 12 11 10 9 8 6 4 0.
LANES(mxfp4u<>, 0, 0x181412100f0e0d0c, 0x00040608090a0b0c)
GLOBL mxfp4u<>(SB), RODATA|NOPTR, $32

// MXW(c, lo, hi) decodes chunk c: lo = the values+12 of its low nibbles (elements 4c..), hi
// those of its high nibbles (16+4c..).
#define MXW(c, lo, hi) \
	VMOVDQU 8+32*c(SI), lo;          \
	VPSRLW  $4, lo, hi;              \
	VPAND   ·mask0f(SB), lo, lo;     \
	VPAND   ·mask0f(SB), hi, hi;     \
	VPSHUFB lo, Y4, lo;              \
	VPSHUFB hi, Y4, hi

// MXX adds chunks a (Y0, Y1) and b (Y5, Y6) times column P's activations to the int32 sums in
// acc: the four vpmaddubsw pair sums (each at most 2·24·127 = 6096) add up in 16 bits, then
// widen.
#define MXX(a, b, P, acc) \
	VPBROADCASTD 2+4*a(P), Y2;          \
	VPMADDUBSW   Y2, Y0, Y2;            \
	VPBROADCASTD 18+4*a(P), Y3;         \
	VPMADDUBSW   Y3, Y1, Y3;            \
	VPADDW       Y3, Y2, Y2;            \
	VPBROADCASTD 2+4*b(P), Y3;          \
	VPMADDUBSW   Y3, Y5, Y3;            \
	VPADDW       Y3, Y2, Y2;            \
	VPBROADCASTD 18+4*b(P), Y3;         \
	VPMADDUBSW   Y3, Y6, Y3;            \
	VPADDW       Y3, Y2, Y2;            \
	VPMADDWD     ·ones16(SB), Y2, Y2;   \
	VPADDD       Y2, acc, acc

// MXSCALE subtracts 12·Σx (the int32 at S: the weights were the values+12), then accumulates
// the sums into facc times the row scales (Y7) times the column's scale, the float32 at F
// (packed_amd64.s's Q4SCALE and PFLOAT, repeated: macros are per file).
#define MXSCALE(S, F, acc, facc) \
	VPBROADCASTD S, Y2;        \
	VPSUBD       Y2, acc, acc; \
	VCVTDQ2PS    acc, acc;     \
	VBROADCASTSS F, Y3;        \
	VMULPS       Y7, Y3, Y3;   \
	VFMADD231PS  Y3, acc, facc

// The chunk pairs (0, 1) and (2, 3) for the first n columns.
#define MXC1(a, b) MXW(a, Y0, Y1); MXW(b, Y5, Y6); MXX(a, b, DI, Y8)
#define MXC2(a, b) MXC1(a, b); MXX(a, b, R10, Y9)
#define MXC3(a, b) MXC2(a, b); MXX(a, b, R12, Y10)
#define MXC4(a, b) MXC3(a, b); MXX(a, b, R13, Y11)

#define MXBLOCK(C) C(0, 1); C(2, 3)

#define MXS1 MXSCALE(0(R9), 16(R9), Y8, Y12)
#define MXS2 MXS1; MXSCALE(4(R9), 20(R9), Y9, Y13)
#define MXS3 MXS2; MXSCALE(8(R9), 24(R9), Y10, Y14)
#define MXS4 MXS3; MXSCALE(12(R9), 28(R9), Y11, Y15)

#define MXB1(DP) MXBLOCK(MXC1); MXS1
#define MXB2(DP) MXBLOCK(MXC2); MXS2
#define MXB3(DP) MXBLOCK(MXC3); MXS3
#define MXB4(DP) MXBLOCK(MXC4); MXS4

// func mxfp4PanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// sums: panelSums with m = 12.
TEXT ·mxfp4PanelAVX2(SB), NOSPLIT, $0-72
	VP_PROLOGUE(0x0f0f0f0f)
	VMOVDQU mxfp4u<>(SB), Y4
	VP_KERNEL(MXNEXT, MXB1, MXB2, MXB3, MXB4, _, 136, VP_NOFIX, mxp, mxn1, mxn2, mxn3, mxn4, mxdone, mxnext)
