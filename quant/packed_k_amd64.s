#include "textflag.h"
#include "packed_k_amd64.h"

// Kernels for packed Q4_K and Q6_K panels (layout in packed_k.go): 8 rows times nx (1..4) columns
// of Q8_K activations. A chunk of 32 bytes holds the same 4 elements of the 8 rows, one row per
// dword lane; VPMADDUBSW with 4 broadcast activation bytes leaves each row's two pair sums in its
// lane, so a sub-block's products accumulate vertically in 16 bits and one VPMADDWD by the 8 rows'
// scale pairs (sc, sc) per lane widens and scales them. Per super-block and column the 8 rows'
// integer sums are converted once and folded into one float accumulator per column. Each chunk is
// decoded once for all nx columns; each nx has its own fully unrolled loop.
//
// GP registers: CX super-blocks left; SI the panel's current super-block; DI, R10, R12, R13 the
// current Q8_K blocks of columns 0-3 (R8 apart); R11 nx; DX out; R9 outStride at the end.
//
// Exactness: the integer sums are exact for any activation quants (-128 included). Q4_K: a word
// sums 16 products of levels <= 15 with |x| <= 128, |.| <= 30720; times a 6-bit scale and summed
// over a super-block far inside int32. Q6_K: a word sums 4 products of levels <= 63, |.| <= 32256;
// then times an int8 scale. Mins and the Q6_K offset come from the bsums (16 quants each, so
// |bsum| <= 2048). No VPMADDUBSW saturates (|pair| <= 2·63·128).
//
// Only VEX encodable forms are used (shifts take register sources): the kernels need AVX2, FMA
// and F16C, nothing of AVX-512.

// ---------------------------------------------------------------------------------------------
// Q4_K. Y0-Y3: 16-bit sums of the current sub-block for columns 0-3 (at the end of a super-block
// the min sums); Y4-Y7: the super-block's int32 sums Σ sc·dot; Y8-Y11: float results; Y12, Y13:
// a chunk's low and high nibbles (scratch at sub-block ends); Y14: scratch, the sub-block's scale
// pairs; Y15: 0x0f bytes. The 128-byte frame holds the super-block's scale/min vectors U_0..U_3,
// unpacked once per super-block.

// K4XF / K4X add chunk c of sub-block s times column P's activations to the 16-bit sums acc
// (K4XF starts them, for the first chunk).
#define K4XF(s, c, P, acc) \
	VPBROADCASTD 4+32*s+4*c(P), Y14;  \
	VPMADDUBSW   Y14, Y12, acc;       \
	VPBROADCASTD 20+32*s+4*c(P), Y14; \
	VPMADDUBSW   Y14, Y13, Y14;       \
	VPADDW       Y14, acc, acc

#define K4X(s, c, P, acc) \
	VPBROADCASTD 4+32*s+4*c(P), Y14;  \
	VPMADDUBSW   Y14, Y12, Y14;       \
	VPADDW       Y14, acc, acc;       \
	VPBROADCASTD 20+32*s+4*c(P), Y14; \
	VPMADDUBSW   Y14, Y13, Y14;       \
	VPADDW       Y14, acc, acc

#define K4F1(s, c) K4XF(s, c, DI, Y0)
#define K4F2(s, c) K4F1(s, c); K4XF(s, c, R10, Y1)
#define K4F3(s, c) K4F2(s, c); K4XF(s, c, R12, Y2)
#define K4F4(s, c) K4F3(s, c); K4XF(s, c, R13, Y3)

#define K4C1(s, c) K4X(s, c, DI, Y0)
#define K4C2(s, c) K4C1(s, c); K4X(s, c, R10, Y1)
#define K4C3(s, c) K4C2(s, c); K4X(s, c, R12, Y2)
#define K4C4(s, c) K4C3(s, c); K4X(s, c, R13, Y3)

// Sub-block ends: scale the 16-bit sums acc by the pairs in Y14 into the int32 sums iacc (K4SF
// for sub-block 0 sets them).
#define K4SF1 VPMADDWD Y14, Y0, Y4
#define K4SF2 K4SF1; VPMADDWD Y14, Y1, Y5
#define K4SF3 K4SF2; VPMADDWD Y14, Y2, Y6
#define K4SF4 K4SF3; VPMADDWD Y14, Y3, Y7

#define K4SA(acc, iacc) VPMADDWD Y14, acc, acc; VPADDD acc, iacc, iacc
#define K4S1 K4SA(Y0, Y4)
#define K4S2 K4S1; K4SA(Y1, Y5)
#define K4S3 K4S2; K4SA(Y2, Y6)
#define K4S4 K4S3; K4SA(Y3, Y7)

// Blocks for n columns: the AVX2 scale pairs (sc, sc) from ·k4dup, no clearing (F sets the
// 16-bit sums).
#define K4BA(F, C, SF, S, MF, M, FOLD) K4BLOCK(·k4dup+0, ·k4dup+64, KP_NONE, F, C, SF, S, MF, M, FOLD)

#define K4B1 K4BA(K4F1, K4C1, K4SF1, K4S1, K4MF1, K4M1, K4FOLD1)
#define K4B2 K4BA(K4F2, K4C2, K4SF2, K4S2, K4MF2, K4M2, K4FOLD2)
#define K4B3 K4BA(K4F3, K4C3, K4SF3, K4S3, K4MF3, K4M3, K4FOLD3)
#define K4B4 K4BA(K4F4, K4C4, K4SF4, K4S4, K4MF4, K4M4, K4FOLD4)

// func q4KPanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)
TEXT ·q4KPanelAVX2(SB), NOSPLIT, $128-64
	KP_PROLOGUE(0x0f0f0f0f)
	KP_KERNEL(K4B1, K4B2, K4B3, K4B4, Y8, Y9, Y10, Y11, k4p, k4n1, k4n2, k4n3, k4n4, k4done, k4next)

// ---------------------------------------------------------------------------------------------
// Q6_K. Y0-Y3: the super-block's int32 sums for columns 0-3; Y4-Y7: float results; Y8: the scale
// pairs (sc_2i, sc_2i+1) per lane of the current group pair, then 32 times them; Y9: the current
// group's scale pair (sc, sc); Y10, Y11: two level vectors; Y12, Y13: scratch; Y14: the 8 rows' d
// at the end of a super-block; Y15: 0x3f bytes.

// Q6X adds the two level vectors times column P's 8 activations at off, scaled by Y9, to acc.
#define Q6X(off, P, acc) \
	Q6PROD(off, P, Y10, Y11, Y12, Y13); \
	VPMADDWD Y9, Y12, Y12;              \
	VPADDD   Y12, acc, acc

#define Q6C1(off) Q6X(off, DI, Y0)
#define Q6C2(off) Q6C1(off); Q6X(off, R10, Y1)
#define Q6C3(off) Q6C2(off); Q6X(off, R12, Y2)
#define Q6C4(off) Q6C3(off); Q6X(off, R13, Y3)

// Q6UNIT runs unit (group) u for the columns of C.
#define Q6UNIT(u, C) \
	Q6DA(u);      \
	C(4+16*u);    \
	Q6DB(u);      \
	C(12+16*u)

// Q6O subtracts Σ 32·sc·bsum of group pair i (32 times the scale pairs in Y8) from acc.
#define Q6O(i, P, acc) \
	VPBROADCASTD 260+4*i(P), Y12; \
	VPMADDWD     Y8, Y12, Y12;    \
	VPSUBD       Y12, acc, acc

#define Q6O1(i) Q6O(i, DI, Y0)
#define Q6O2(i) Q6O1(i); Q6O(i, R10, Y1)
#define Q6O3(i) Q6O2(i); Q6O(i, R12, Y2)
#define Q6O4(i) Q6O3(i); Q6O(i, R13, Y3)

// Q6P runs group pair i (Q6PAIR): the offsets take 32 times the scale pairs.
#define Q6X32 VPSLLW $5, Y8, Y8
#define Q6P(i, u0, u1, C, O) Q6PAIR(i, u0, u1, Q6UNIT, Q6X32, C, O)

#define Q6Z1 VPXOR Y0, Y0, Y0
#define Q6Z2 Q6Z1; VPXOR Y1, Y1, Y1
#define Q6Z3 Q6Z2; VPXOR Y2, Y2, Y2
#define Q6Z4 Q6Z3; VPXOR Y3, Y3, Y3

#define Q6FOLD1 Q6FOLD(DI, Y0, Y4)
#define Q6FOLD2 Q6FOLD1; Q6FOLD(R10, Y1, Y5)
#define Q6FOLD3 Q6FOLD2; Q6FOLD(R12, Y2, Y6)
#define Q6FOLD4 Q6FOLD3; Q6FOLD(R13, Y3, Y7)

#define Q6B1 Q6BLOCK(Q6P, Q6Z1, Q6C1, Q6O1, Q6FOLD1)
#define Q6B2 Q6BLOCK(Q6P, Q6Z2, Q6C2, Q6O2, Q6FOLD2)
#define Q6B3 Q6BLOCK(Q6P, Q6Z3, Q6C3, Q6O3, Q6FOLD3)
#define Q6B4 Q6BLOCK(Q6P, Q6Z4, Q6C4, Q6O4, Q6FOLD4)

// func q6KPanelAVX2(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)
TEXT ·q6KPanelAVX2(SB), NOSPLIT, $0-64
	KP_PROLOGUE(0x3f3f3f3f)
	KP_KERNEL(Q6B1, Q6B2, Q6B3, Q6B4, Y4, Y5, Y6, Y7, q6p, q6n1, q6n2, q6n3, q6n4, q6done, q6next)

// k4dup+32v picks byte 4r+v of each row's dword (lane-local r) into both words of the dword as
// an int16 (the high bytes zero): v = 0, 2 give the scales of sub-blocks 2q, 2q+1 from U_q, v = 1,
// 3 their mins.
#define K4DUP(v, lo, hi) LANES(·k4dup, 32*v, lo, hi)

K4DUP(0, 0x8004800480008000, 0x800c800c80088008)
K4DUP(1, 0x8005800580018001, 0x800d800d80098009)
K4DUP(2, 0x8006800680028002, 0x800e800e800a800a)
K4DUP(3, 0x8007800780038003, 0x800f800f800b800b)
GLOBL ·k4dup(SB), RODATA|NOPTR, $128

CONST32(·k4m30, 0x3030303030303030)

// q6dup duplicates word 0 (+0) or word 1 (+32) of every dword: (sc_2i, sc_2i+1) to (sc_2i, sc_2i)
// or (sc_2i+1, sc_2i+1).
LANES(·q6dup, 0, 0x0504050401000100, 0x0d0c0d0c09080908)
LANES(·q6dup, 32, 0x0706070603020302, 0x0f0e0f0e0b0a0b0a)
GLOBL ·q6dup(SB), RODATA|NOPTR, $64
