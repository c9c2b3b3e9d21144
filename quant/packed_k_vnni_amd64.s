#include "textflag.h"
#include "packed_k_amd64.h"

// AVX-512 VNNI kernels for packed Q4_K and Q6_K panels (layout in packed_k.go; Q6_K below).
// Q4_K: the AVX2 kernel's computation (q4KPanelAVX2 in packed_k_amd64.s, whose frame, scale
// unpacking, mins and folding it shares through packed_k_amd64.h) with VPDPBUSD for the level products. The levels (0..15) are the unsigned operand
// and the activations the signed one, embedded-broadcast from memory, so one instruction per
// nibble half, chunk and column replaces VPMADDUBSW and VPADDW, and the sub-block sums are int32
// from the start; they are scaled with VPMULLD by the 8 rows' 6-bit scales (one per dword, from
// vk4sc) instead of VPMADDWD by scale pairs.
//
// Exactness: a sub-block sum is at most 32·15·128 in magnitude, times a scale <= 63 and summed
// over 8 sub-blocks, far inside int32, and exact for any activation quants. It equals the AVX2
// kernel's sum, whose 16-bit partial sums are exact too, and the mins and the folding are the
// same instructions, so the results are bit-identical.
//
// Registers: CX super-blocks left; SI the current super-block; DI, R10, R12, R13 columns 0-3
// (R8 apart); R11 nx; DX out. Y0-Y3: sub-block sums of columns 0-3 (at the end of a super-block
// the min sums), Y16-Y19 their high-nibble halves; Y4-Y7: the super-block's Σ sc·dot; Y8-Y11: float results; Y12, Y13: a chunk's
// low and high nibbles; Y14: scratch, the sub-block's scales; Y15: 0x0f bytes. The 128-byte frame
// holds the scale/min vectors U_0..U_3 as in q4KPanelAVX2.

// VK4X adds the chunk's low nibbles times column P's activations to acc and the high nibbles'
// to acc2: two chains of 4 dependent VPDPBUSDs per sub-block instead of one of 8.
#define VK4X(s, c, P, acc, acc2) \
	VPDPBUSD.BCST 4+32*s+4*c(P), Y12, acc; \
	VPDPBUSD.BCST 20+32*s+4*c(P), Y13, acc2

#define VK4C1(s, c) VK4X(s, c, DI, Y0, Y16)
#define VK4C2(s, c) VK4C1(s, c); VK4X(s, c, R10, Y1, Y17)
#define VK4C3(s, c) VK4C2(s, c); VK4X(s, c, R12, Y2, Y18)
#define VK4C4(s, c) VK4C3(s, c); VK4X(s, c, R13, Y3, Y19)

#define VK4Z1 VPXOR Y0, Y0, Y0; VPXORD Y16, Y16, Y16
#define VK4Z2 VK4Z1; VPXOR Y1, Y1, Y1; VPXORD Y17, Y17, Y17
#define VK4Z3 VK4Z2; VPXOR Y2, Y2, Y2; VPXORD Y18, Y18, Y18
#define VK4Z4 VK4Z3; VPXOR Y3, Y3, Y3; VPXORD Y19, Y19, Y19

// Sub-block ends: add the two sums acc2 and acc and scale them by the scales in Y14 into iacc
// (VK4SF for sub-block 0 sets them).
#define VK4SFA(acc, acc2, iacc) VPADDD acc2, acc, acc; VPMULLD Y14, acc, iacc
#define VK4SF1 VK4SFA(Y0, Y16, Y4)
#define VK4SF2 VK4SF1; VK4SFA(Y1, Y17, Y5)
#define VK4SF3 VK4SF2; VK4SFA(Y2, Y18, Y6)
#define VK4SF4 VK4SF3; VK4SFA(Y3, Y19, Y7)

#define VK4SA(acc, acc2, iacc) VPADDD acc2, acc, acc; VPMULLD Y14, acc, acc; VPADDD acc, iacc, iacc
#define VK4S1 VK4SA(Y0, Y16, Y4)
#define VK4S2 VK4S1; VK4SA(Y1, Y17, Y5)
#define VK4S3 VK4S2; VK4SA(Y2, Y18, Y6)
#define VK4S4 VK4S3; VK4SA(Y3, Y19, Y7)

// Blocks for n columns: the scales from ·vk4sc, the sums cleared per sub-block (Z), every chunk
// added by C.
#define VK4BLOCK(Z, C, SF, S, MF, M, FOLD) K4BLOCK(·vk4sc+0, ·vk4sc+32, Z, C, C, SF, S, MF, M, FOLD)

#define VK4B1 VK4BLOCK(VK4Z1, VK4C1, VK4SF1, VK4S1, K4MF1, K4M1, K4FOLD1)
#define VK4B2 VK4BLOCK(VK4Z2, VK4C2, VK4SF2, VK4S2, K4MF2, K4M2, K4FOLD2)
#define VK4B3 VK4BLOCK(VK4Z3, VK4C3, VK4SF3, VK4S3, K4MF3, K4M3, K4FOLD3)
#define VK4B4 VK4BLOCK(VK4Z4, VK4C4, VK4SF4, VK4S4, K4MF4, K4M4, K4FOLD4)

// func q4KPanelVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)
TEXT ·q4KPanelVNNI(SB), NOSPLIT, $128-64
	KP_PROLOGUE(0x0f0f0f0f)
	KP_KERNEL(VK4B1, VK4B2, VK4B3, VK4B4, Y8, Y9, Y10, Y11, vk4p, vk4n1, vk4n2, vk4n3, vk4n4, vk4done, vk4next)

// ---------------------------------------------------------------------------------------------
// Q6_K: q6KPanelAVX2 (packed_k_amd64.s) with VPDPWSSD, which adds word-pair products to dwords
// and so fuses VPMADDWD with the VPADDD after it: once per group for the scale pairs, and, with
// the scale pairs negated, for the level offset, taking the bsums as an embedded broadcast. The
// integer sums are the AVX2 kernel's exactly (|32·sc| <= 4096 as before; no sum saturates or
// wraps), and so are the results.
//
// Y0-Y3, Y16-Y19, Y20-Y23: the super-block's int32 sums for columns 0-3 (see VQ6C1); Y4-Y7: float results; Y8: the scale
// pairs (sc_2i, sc_2i+1) per lane of the current group pair, then −32 times them; Y9: the current
// group's scale pair (sc, sc); Y10, Y11: two level vectors; Y12, Y13: scratch; Y14: the 8 rows' d
// at the end of a super-block; Y15: 0x3f bytes.

// VQ6X adds the two level vectors times column P's 8 activations at off, scaled by Y9, to acc.
#define VQ6X(off, P, acc) Q6PROD(off, P, Y10, Y11, Y12, Y13); VPDPWSSD Y9, Y12, acc

// Column sets into the sums a0-a3 of columns 0-3: VPDPWSSD puts its product on the chain of
// the sum it adds to, so elements 0-7 of a group go to Y0-Y3, elements 8-15 to Y16-Y19 and the
// level offsets to Y20-Y23, three chains instead of one (latency-bound with one column).
#define VQ6C1(off, a0, a1, a2, a3) VQ6X(off, DI, a0)
#define VQ6C2(off, a0, a1, a2, a3) VQ6C1(off, a0, a1, a2, a3); VQ6X(off, R10, a1)
#define VQ6C3(off, a0, a1, a2, a3) VQ6C2(off, a0, a1, a2, a3); VQ6X(off, R12, a2)
#define VQ6C4(off, a0, a1, a2, a3) VQ6C3(off, a0, a1, a2, a3); VQ6X(off, R13, a3)

// VQ6UNIT runs unit (group) u for the columns of C.
#define VQ6UNIT(u, C) \
	Q6DA(u);                        \
	C(4+16*u, Y0, Y1, Y2, Y3);       \
	Q6DB(u);                        \
	C(12+16*u, Y16, Y17, Y18, Y19)

// VQ6O subtracts Σ 32·sc·bsum of group pair i from acc: adds the bsum pair times −32 times the
// scale pairs in Y8.
#define VQ6O(i, P, acc) VPDPWSSD.BCST 260+4*i(P), Y8, acc

#define VQ6O1(i) VQ6O(i, DI, Y20)
#define VQ6O2(i) VQ6O1(i); VQ6O(i, R10, Y21)
#define VQ6O3(i) VQ6O2(i); VQ6O(i, R12, Y22)
#define VQ6O4(i) VQ6O3(i); VQ6O(i, R13, Y23)

// VQ6P runs group pair i (Q6PAIR): the offsets take −32 times the scale pairs, so that VPDPWSSD
// adds them.
#define VQ6X32 \
	VPSLLW $5, Y8, Y8;    \
	VPXOR  Y13, Y13, Y13; \
	VPSUBW Y8, Y13, Y8

#define VQ6P(i, u0, u1, C, O) Q6PAIR(i, u0, u1, VQ6UNIT, VQ6X32, C, O)

#define VQ6ZC(a, b, c) VPXORD a, a, a; VPXORD b, b, b; VPXORD c, c, c
#define VQ6Z1 VQ6ZC(Y0, Y16, Y20)
#define VQ6Z2 VQ6Z1; VQ6ZC(Y1, Y17, Y21)
#define VQ6Z3 VQ6Z2; VQ6ZC(Y2, Y18, Y22)
#define VQ6Z4 VQ6Z3; VQ6ZC(Y3, Y19, Y23)

#define VQ6FOLD1 Q6SUM3(Y0, Y16, Y20); Q6FOLD(DI, Y0, Y4)
#define VQ6FOLD2 VQ6FOLD1; Q6SUM3(Y1, Y17, Y21); Q6FOLD(R10, Y1, Y5)
#define VQ6FOLD3 VQ6FOLD2; Q6SUM3(Y2, Y18, Y22); Q6FOLD(R12, Y2, Y6)
#define VQ6FOLD4 VQ6FOLD3; Q6SUM3(Y3, Y19, Y23); Q6FOLD(R13, Y3, Y7)

#define VQ6B1 Q6BLOCK(VQ6P, VQ6Z1, VQ6C1, VQ6O1, VQ6FOLD1)
#define VQ6B2 Q6BLOCK(VQ6P, VQ6Z2, VQ6C2, VQ6O2, VQ6FOLD2)
#define VQ6B3 Q6BLOCK(VQ6P, VQ6Z3, VQ6C3, VQ6O3, VQ6FOLD3)
#define VQ6B4 Q6BLOCK(VQ6P, VQ6Z4, VQ6C4, VQ6O4, VQ6FOLD4)

// func q6KPanelVNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)
TEXT ·q6KPanelVNNI(SB), NOSPLIT, $0-64
	KP_PROLOGUE(0x3f3f3f3f)
	KP_KERNEL(VQ6B1, VQ6B2, VQ6B3, VQ6B4, Y4, Y5, Y6, Y7, vq6p, vq6n1, vq6n2, vq6n3, vq6n4, vq6done, vq6next)

// vk4sc+32i picks byte 4r+2i of each row's dword (lane-local r) into the dword's low byte, the
// others zero: the scales of sub-blocks 2q (i = 0) and 2q+1 (i = 1) from U_q, as int32s.
#define VK4SC(i, lo, hi) LANES(·vk4sc, 32*i, lo, hi)

VK4SC(0, 0x8080800480808000, 0x8080800c80808008)
VK4SC(1, 0x8080800680808002, 0x8080800e8080800a)
GLOBL ·vk4sc(SB), RODATA|NOPTR, $64
