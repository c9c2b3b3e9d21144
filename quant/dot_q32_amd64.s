#include "textflag.h"
#include "dot_q32_amd64.h"

// Q5_0, IQ4_NL, MXFP4, Q4_1 and Q5_1 x Q8_0 dot products with AVX2, FMA and F16C (see
// dot_q32_amd64.go).
//
// func dotQ5_0AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)  (and the others)
//
// nb >= 4 blocks, a multiple of 4; 1 <= nx <= 4. As in dot_q8_amd64.s, each loop iteration
// decodes four weight blocks (32 level bytes each, element order), then per column reduces the
// four blocks' integer products into one vector (lane = block, per 128-bit half) that is converted
// and fused-multiply-added with the blocks' scale products. Accumulators: Y12-Y15 (columns 0-3,
// eight lanes summed at the end). SI weights; DI, R10, R12, R13 columns 0-3; CX iterations; R11
// nx; DX out.
//
// Signed levels (Q5_0 in [-16, 15], IQ4_NL table values in [-127, 113], MXFP4's in [-12, 12]) are
// multiplied as in
// ggml: vpsignb gives the activation quants the weights' signs so that vpmaddubsw can multiply
// |w| (unsigned) by ±x. Unsigned levels (Q4_1 in [0, 15], Q5_1 in [0, 31]) go to vpmaddubsw as
// they are; their min term needs Σx per block, which a vpmaddubsw with bytes of 1 sums.
//
// Integer ranges (activation quants in [-127, 127], as QuantizeAct writes them): vpmaddubsw pair
// sums stay below 2·127·128 = 32512, so none saturates. Q5_0 (|w| <= 16), Q4_1 and Q5_1
// (w <= 31) then sum up to 8 products in 16 bits (<= 8·31·128 = 31744) before vpmaddwd widens
// them; IQ4_NL and MXFP4 widen the pair sums at once.

CONST32(maskf0<>, 0xf0f0f0f0f0f0f0f0)
CONST32(mask10<>, 0x1010101010101010)
CONST32(ones8<>, 0x0101010101010101)
CONST32(allff<>, -1)

// bitshuf spreads a broadcast uint32 so that byte i holds its byte i/8; bitmask then has every bit
// set but bit i%8 of byte i, so that the byte is all ones exactly when bit i of the uint32 is set.
TABLE32(bitshuf<>, 0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303)

CONST32(bitmask<>, 0x7fbfdfeff7fbfdfe)

// iq4nl is kvalues_iq4nl in both lanes: -127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113
// (dot_k23_amd64.s's IQ4_XS kernel uses it too).
LANES(·iq4nl, 0, 0xf6eaddcfbfad9881, 0x7159453526190d01)
GLOBL ·iq4nl(SB), RODATA|NOPTR, $32

// NIBBLES loads the 16 quant bytes at addr into both halves of v as the 32 element nibbles: low
// nibbles (elements 0-15) in the lower half, high nibbles (16-31) in the upper half.
#define NIBBLES(addr, v) \
	VBROADCASTI128 addr, v;         \
	VPSRLVQ        ·q4shift(SB), v, v; \
	VPAND          ·mask0f(SB), v, v

// HIBITS sets byte i of t to 0xff where bit i of the uint32 at addr is set, else 0.
#define HIBITS(addr, t) \
	VPBROADCASTD addr, t;             \
	VPSHUFB      bitshuf<>(SB), t, t; \
	VPOR         bitmask<>(SB), t, t; \
	VPCMPEQB     allff<>(SB), t, t

// Q50DEC decodes the Q5_0 block at off(SI): w = levels-16 as signed bytes (a level without its
// fifth bit is the nibble with 0xf0 ORed in), a = |w|. Clobbers Y8.
#define Q50DEC(off, w, a) \
	NIBBLES(off+6(SI), w);         \
	HIBITS(off+2(SI), Y8);         \
	VPANDN maskf0<>(SB), Y8, Y8;   \
	VPOR   Y8, w, w;               \
	VPSIGNB w, w, a

// IQ4DEC decodes the IQ4_NL block at off(SI) with the table in Y8: w = table values, a = |w|.
#define IQ4DEC(off, w, a) \
	NIBBLES(off+2(SI), w); \
	VPSHUFB w, Y8, w;      \
	VPSIGNB w, w, a

// mxfp4tab is kvalues_mxfp4 (the E2M1 values doubled) in both lanes:
// 0 1 2 3 4 6 8 12 0 -1 -2 -3 -4 -6 -8 -12 (packed_mxfp4_amd64.s's panel kernel uses it too).
LANES(·mxfp4tab, 0, 0x0c08060403020100, 0xf4f8fafcfdfeff00)
GLOBL ·mxfp4tab(SB), RODATA|NOPTR, $32

// MXDEC decodes the MXFP4 block at off(SI) (scale byte, then the codes) with mxfp4tab in Y8:
// w = table values, a = |w|.
#define MXDEC(off, w, a) \
	NIBBLES(off+1(SI), w); \
	VPSHUFB w, Y8, w;      \
	VPSIGNB w, w, a

// The dword constants of the E8M0 scale conversions (E8M0HALF4, and packed_mxfp4_amd64.s's):
// 2<<23, 1<<23 and the subnormal 2^-128 (0x00200000).
CONST32(·e8m0two, 0x0100000001000000)
CONST32(·e8m0one, 0x0080000000800000)
CONST32(·e8m0sub, 0x0020000000200000)

// E8M0HALF4 sets Y11 to [s0 s1 s2 s3 | s0 s1 s2 s3], s_i = 2^(e_i-128) for the scale bytes e_i
// of the four MXFP4 blocks at SI, bs bytes apart (ggml's GGML_E8M0_TO_FP32_HALF, exactly): the
// float bits (e-1)<<23 for e >= 2, the subnormal 0x00200000<<e for e < 2, chosen by the sign of
// (e-2)<<23 (VBLENDVPS). Clobbers AX, BX and X8-X10.
#define E8M0HALF4(bs) \
	MOVBLZX     0(SI), AX;               \
	MOVBLZX     bs(SI), BX;              \
	SHLL        $8, BX;                  \
	ORL         BX, AX;                  \
	MOVBLZX     2*bs(SI), BX;            \
	SHLL        $16, BX;                 \
	ORL         BX, AX;                  \
	MOVBLZX     3*bs(SI), BX;            \
	SHLL        $24, BX;                 \
	ORL         BX, AX;                  \
	VMOVD       AX, X11;                 \
	VPMOVZXBD   X11, X11;                \
	VPSLLD      $23, X11, X9;            \
	VPSUBD      ·e8m0two(SB), X9, X9;   \
	VPADDD      ·e8m0one(SB), X9, X10;  \
	VMOVDQU     ·e8m0sub(SB), X8;       \
	VPSLLVD     X11, X8, X8;             \
	VBLENDVPS   X9, X8, X10, X11;        \
	VINSERTI128 $1, X11, Y11, Y11

// Q51DEC decodes the Q5_1 block at off(SI) into the unsigned levels u. Clobbers Y8.
#define Q51DEC(off, u) \
	NIBBLES(off+8(SI), u);       \
	HIBITS(off+4(SI), Y8);       \
	VPAND mask10<>(SB), Y8, Y8;  \
	VPOR  Y8, u, u

// TREE16 reduces the int16 pair sums of four blocks (t0..t3, lane i of the result = block i)
// into int32s in t0, clobbering t1-t3.
#define TREE16(t0, t1, t2, t3) \
	VPHADDW  t1, t0, t0; \
	VPHADDW  t3, t2, t2; \
	VPHADDW  t2, t0, t0; \
	VPMADDWD ·ones16(SB), t0, t0

// COL_Q50 accumulates one column (activation blocks at P) over the four Q5_0 blocks in Y0-Y7.
#define COL_Q50(P, acc) \
	PROD16(2(P), Y0, Y1, Y8);    \
	PROD16(36(P), Y2, Y3, Y9);   \
	PROD16(70(P), Y4, Y5, Y10);  \
	VPHADDW Y9, Y8, Y8;          \
	PROD16(104(P), Y6, Y7, Y9);  \
	VPHADDW Y9, Y10, Y10;        \
	VPHADDW Y10, Y8, Y8;         \
	VPMADDWD ·ones16(SB), Y8, Y8; \
	FOLD(P, acc)

// COL_MIN accumulates one column over the four Q4_1/Q5_1 blocks in Y0-Y3 (unsigned levels),
// with the weight scales in Y11, the mins in Y5 and bytes of 1 in Y4:
// acc += d_w·d_x·(levels·quants) + m_w·d_x·Σquants.
#define COL_MIN(P, acc) \
	VPMADDUBSW 2(P), Y0, Y8;    \
	VPMADDUBSW 36(P), Y1, Y9;   \
	VPMADDUBSW 70(P), Y2, Y10;  \
	VPMADDUBSW 104(P), Y3, Y6;  \
	TREE16(Y8, Y9, Y10, Y6);    \
	VPMADDUBSW 2(P), Y4, Y9;    \
	VPMADDUBSW 36(P), Y4, Y10;  \
	VPMADDUBSW 70(P), Y4, Y6;   \
	VPMADDUBSW 104(P), Y4, Y7;  \
	TREE16(Y9, Y10, Y6, Y7);    \
	VCVTDQ2PS Y8, Y8;           \
	VCVTDQ2PS Y9, Y9;           \
	GATHER4(0, P, 34);          \
	HALVES(X10, Y10);           \
	VMULPS Y11, Y10, Y6;        \
	VFMADD231PS Y6, Y8, acc;    \
	VMULPS Y5, Y10, Y6;         \
	VFMADD231PS Y6, Y9, acc

// Q41DEC decodes the Q4_1 block at off(SI) into the unsigned levels u.
#define Q41DEC(off, u) NIBBLES(off+4(SI), u)

// DEC4M decodes the four Q4_1/Q5_1 blocks of bs bytes at SI with DEC(off, u) into Y0-Y3, their
// f16 scales into Y11 and their f16 mins into Y5.
#define DEC4M(DEC, bs) \
	DEC(0, Y0);         \
	DEC(bs, Y1);        \
	DEC(2*bs, Y2);      \
	DEC(3*bs, Y3);      \
	GATHER4(0, SI, bs); \
	HALVES(X11, Y11);   \
	GATHER4(2, SI, bs); \
	HALVES(X5, Y5)

// The loops' decoders. IQ4_NL reloads its table (Y8 is scratch in the columns).
#define Q50BLOCKS DEC4(Q50DEC, 22)
#define IQ4BLOCKS VMOVDQU ·iq4nl(SB), Y8; DEC4(IQ4DEC, 18)
#define MXBLOCKS VMOVDQU ·mxfp4tab(SB), Y8; MXDEC(0, Y0, Y1); MXDEC(17, Y2, Y3); MXDEC(34, Y4, Y5); MXDEC(51, Y6, Y7); E8M0HALF4(17)
#define Q41BLOCKS DEC4M(Q41DEC, 20)
#define Q51BLOCKS DEC4M(Q51DEC, 24)

TEXT ·dotQ5_0AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	ROWLOOP(PF2, Q50BLOCKS, COL_Q50, 88, q50loop, q50next, q50ret)

TEXT ·dotIQ4NLAVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	ROWLOOP(PF2, IQ4BLOCKS, COL32, 72, iq4loop, iq4next, iq4ret)

TEXT ·dotMXFP4AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	ROWLOOP(PF2, MXBLOCKS, COL32, 68, mxloop, mxnext, mxret)

TEXT ·dotQ4_1AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	VMOVDQU ones8<>(SB), Y4
	ROWLOOP(PF2, Q41BLOCKS, COL_MIN, 80, q41loop, q41next, q41ret)

TEXT ·dotQ5_1AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	VMOVDQU ones8<>(SB), Y4
	ROWLOOP(PF2, Q51BLOCKS, COL_MIN, 96, q51loop, q51next, q51ret)
