#include "textflag.h"

// The AVX2 kernel for packed MXFP4 weights (see packed.go for the panel layout: a block's 8 scale
// bytes, then Q4_0's four chunks of nibbles): 8 rows times nx (1..4) columns of Q8_0
// activations, built like q4PanelAVX2 (packed_amd64.s). The nibbles are looked up in the E2M1
// table (values doubled, as ggml keeps them, in [-12, 12]) and, as in the single-row kernels,
// give their signs to the activations so that vpmaddubsw multiplies |w| by ±x; no activation
// sums are subtracted (sumsMul 0: the kernel reads only the activation scales from the sums).
//
// Registers: the frame's (packed_amd64.h), with Y4 the table, Y0/Y1 the chunk's low/high
// nibbles' values, Y6/Y3 their magnitudes and Y2 scratch.
//
// Exactness: exact integer sums for activation quants in [-127, 127]; a block's 16-bit sums
// take 8 pair sums of at most 2·12·127 per lane (24384). The row scales 2^(e-128) are made
// exactly (MXNEXT), so the kernel differs from its Go twin only in the float32 rounding of the
// fused multiply-add.

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

// MXW(c) decodes chunk c: Y0 = the values of the low nibbles (elements 4c..), Y1 those of the
// high nibbles (16+4c..), Y6 and Y3 their magnitudes.
#define MXW(c) \
	VMOVDQU 8+32*c(SI), Y0; \
	VPSRLW  $4, Y0, Y1;     \
	VPAND   Y5, Y0, Y0;     \
	VPAND   Y5, Y1, Y1;     \
	VPSHUFB Y0, Y4, Y0;     \
	VPSHUFB Y1, Y4, Y1;     \
	VPABSB  Y0, Y6;         \
	VPABSB  Y1, Y3

// MXX adds chunk c times column P's activations to the 16-bit sums in acc.
#define MXX(c, P, acc) \
	VPBROADCASTD 2+4*c(P), Y2;  \
	VPSIGNB      Y0, Y2, Y2;    \
	VPMADDUBSW   Y2, Y6, Y2;    \
	VPADDW       Y2, acc, acc;  \
	VPBROADCASTD 18+4*c(P), Y2; \
	VPSIGNB      Y1, Y2, Y2;    \
	VPMADDUBSW   Y2, Y3, Y2;    \
	VPADDW       Y2, acc, acc

// MXSCALE widens the 16-bit sums, then PFLOAT (packed_amd64.s's, repeated: macros are per
// file) with the column's scale, the float32 at F.
#define MXSCALE(F, acc, facc) \
	VPMADDWD     ·ones16(SB), acc, acc; \
	VCVTDQ2PS    acc, acc;              \
	VBROADCASTSS F, Y3;                 \
	VMULPS       Y7, Y3, Y3;            \
	VFMADD231PS  Y3, acc, facc

#define MXC1(c) MXW(c); MXX(c, DI, Y8)
#define MXC2(c) MXC1(c); MXX(c, R10, Y9)
#define MXC3(c) MXC2(c); MXX(c, R12, Y10)
#define MXC4(c) MXC3(c); MXX(c, R13, Y11)

#define MXBLOCK(C) C(0); C(1); C(2); C(3)

#define MXS1 MXSCALE(16(R9), Y8, Y12)
#define MXS2 MXS1; MXSCALE(20(R9), Y9, Y13)
#define MXS3 MXS2; MXSCALE(24(R9), Y10, Y14)
#define MXS4 MXS3; MXSCALE(28(R9), Y11, Y15)

#define MXB1(DP) MXBLOCK(MXC1); MXS1
#define MXB2(DP) MXBLOCK(MXC2); MXS2
#define MXB3(DP) MXBLOCK(MXC3); MXS3
#define MXB4(DP) MXBLOCK(MXC4); MXS4

// func mxfp4PanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// sums: panelSums with m = 0 (only the scales are read).
TEXT ·mxfp4PanelAVX2(SB), NOSPLIT, $0-72
	VP_PROLOGUE(0x0f0f0f0f)
	VMOVDQU ·mxfp4tab(SB), Y4
	VP_KERNEL(MXNEXT, MXB1, MXB2, MXB3, MXB4, _, 136, VP_NOFIX, mxp, mxn1, mxn2, mxn3, mxn4, mxdone, mxnext)
