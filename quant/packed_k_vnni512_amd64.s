#include "textflag.h"
#include "packed_k_amd64.h"

// AVX-512 VNNI kernel for packed Q4_K weights on 512-bit registers: q4KPanelVNNI's computation
// (packed_k_vnni_amd64.s: the same integer sums, mins and folding, every row's float operations
// in the same order, so bit-identical results) for two panels at once, lanes 0-7 of each zmm
// panel p's rows and lanes 8-15 panel p+1's (as the Q8_0/Q4_0 pair kernels in
// packed_vnni512_amd64.s). Each 32-byte piece of a super-block is loaded from panel p and
// inserted from panel p+1, one panel (R14 bytes) further on; the byte and word operations are
// lane-local, so the shuffle tables are the 256-bit kernel's, broadcast to both halves. The
// scale/min vectors U_0..U_3 stay in registers (Z24-Z27) instead of the frame. Needs AVX-512 BW
// (the byte and word instructions on zmm) besides VNNI.
//
// np must be even. Registers: BX pairs left; CX super-blocks left; SI the super-block of panel
// p; R14 the bytes of a panel; DI, R10, R12, R13 columns 0-3 (R8 apart); R11 nx; DX out. Z0-Z3
// and Z16-Z19: sub-block sums (low and high nibbles; Z0-Z3 the min sums at the end); Z4-Z7:
// Σ sc·dot; Z8-Z11: results; Z12-Z14: scratch; Z15: 0x0f bytes; Z20, Z21: vk4sc; Z22: k4m30;
// Z23, Z28: k4dup+32, k4dup+96.

// ZKP_PROLOGUE is KP_PROLOGUE for pairs: BX counts them, R14 is one panel's bytes (nb
// super-blocks of bs bytes); Z15 = the bytes of mask.
#define ZKP_PROLOGUE(bs, mask) \
	KP_ARGS;               \
	SHRQ  $1, BX;          \
	MOVQ  nb+8(FP), R14;   \
	IMULQ $bs, R14;        \
	MOVL  $mask, AX;       \
	VPBROADCASTD AX, Z15

// ZKLOAD(off, Zr, Yr): the 32 bytes at off of both panels' super-blocks.
#define ZKLOAD(off, Zr, Yr) \
	VMOVDQU64    off(SI), Yr; \
	VINSERTI64X4 $1, off(SI)(R14*1), Zr, Zr

// ZKHALF(off, Zr, Yr, Xr): the 16 bytes at off of both (8 f16 each), as 16 float32.
#define ZKHALF(off, Zr, Yr, Xr) \
	VMOVDQU     off(SI), Xr;                \
	VINSERTI128 $1, off(SI)(R14*1), Yr, Yr; \
	VCVTPH2PS   Yr, Zr

// ZK4UNPACK rebuilds U_0..U_3 (packed_k.go) into Z24-Z27 from A, B and C, as K4UNPACK.
#define ZK4UNPACK \
	ZKLOAD(96, Z14, Y14);                      \
	ZKLOAD(32, Z13, Y13);                      \
	VPANDD Z15, Z13, Z24;                      \
	VPSLLW $4, Z14, Z12;                       \
	VPANDD Z22, Z12, Z12;                      \
	VPORD  Z12, Z24, Z24;                      \
	VPSRLW $4, Z13, Z25;                       \
	VPANDD Z15, Z25, Z25;                      \
	VPSLLW $2, Z14, Z12;                       \
	VPANDD Z22, Z12, Z12;                      \
	VPORD  Z12, Z25, Z25;                      \
	ZKLOAD(64, Z13, Y13);                      \
	VPANDD Z15, Z13, Z26;                      \
	VPANDD Z22, Z14, Z12;                      \
	VPORD  Z12, Z26, Z26;                      \
	VPSRLW $4, Z13, Z27;                       \
	VPANDD Z15, Z27, Z27;                      \
	VPSRLW $2, Z14, Z12;                       \
	VPANDD Z22, Z12, Z12;                      \
	VPORD  Z12, Z27, Z27

// ZK4W decodes chunk c of sub-block s: Z12 the low nibbles' levels, Z13 the high ones'.
#define ZK4W(s, c) \
	ZKLOAD(128+128*s+32*c, Z12, Y12); \
	VPSRLW $4, Z12, Z13;              \
	VPANDD Z15, Z12, Z12;             \
	VPANDD Z15, Z13, Z13

#define ZK4X(s, c, P, acc, acc2) \
	VPDPBUSD.BCST 4+32*s+4*c(P), Z12, acc; \
	VPDPBUSD.BCST 20+32*s+4*c(P), Z13, acc2

#define ZK4C1(s, c) ZK4X(s, c, DI, Z0, Z16)
#define ZK4C2(s, c) ZK4C1(s, c); ZK4X(s, c, R10, Z1, Z17)
#define ZK4C3(s, c) ZK4C2(s, c); ZK4X(s, c, R12, Z2, Z18)
#define ZK4C4(s, c) ZK4C3(s, c); ZK4X(s, c, R13, Z3, Z19)

#define ZK4Z1 VPXORD Z0, Z0, Z0; VPXORD Z16, Z16, Z16
#define ZK4Z2 ZK4Z1; VPXORD Z1, Z1, Z1; VPXORD Z17, Z17, Z17
#define ZK4Z3 ZK4Z2; VPXORD Z2, Z2, Z2; VPXORD Z18, Z18, Z18
#define ZK4Z4 ZK4Z3; VPXORD Z3, Z3, Z3; VPXORD Z19, Z19, Z19

#define ZK4SFA(acc, acc2, iacc) VPADDD acc2, acc, acc; VPMULLD Z14, acc, iacc
#define ZK4SF1 ZK4SFA(Z0, Z16, Z4)
#define ZK4SF2 ZK4SF1; ZK4SFA(Z1, Z17, Z5)
#define ZK4SF3 ZK4SF2; ZK4SFA(Z2, Z18, Z6)
#define ZK4SF4 ZK4SF3; ZK4SFA(Z3, Z19, Z7)

#define ZK4SA(acc, acc2, iacc) VPADDD acc2, acc, acc; VPMULLD Z14, acc, acc; VPADDD acc, iacc, iacc
#define ZK4S1 ZK4SA(Z0, Z16, Z4)
#define ZK4S2 ZK4S1; ZK4SA(Z1, Z17, Z5)
#define ZK4S3 ZK4S2; ZK4SA(Z2, Z18, Z6)
#define ZK4S4 ZK4S3; ZK4SA(Z3, Z19, Z7)

// ZK4SUB runs sub-block s (its scales from U with the table T) as K4SUB.
#define ZK4SUB(s, U, T, Z, F, C, S) \
	PREFETCHT0 KPF+128+128*s(SI);        \
	PREFETCHT0 KPF+192+128*s(SI);        \
	PREFETCHT0 KPF+128+128*s(SI)(R14*1); \
	PREFETCHT0 KPF+192+128*s(SI)(R14*1); \
	Z;                                   \
	K4CHUNKS(s, ZK4W, F, C);             \
	VPSHUFB T, U, Z14;                   \
	S

// Min sums, as K4MF and K4MA, with the (m, m) pairs in Z13.
#define ZK4MF(s, P, macc) K4MINF(s, P, macc, Z13, Z14)
#define ZK4MA(s, P, macc) K4MINA(s, P, macc, Z13, Z14)

#define ZK4MF1(s) ZK4MF(s, DI, Z0)
#define ZK4MF2(s) ZK4MF1(s); ZK4MF(s, R10, Z1)
#define ZK4MF3(s) ZK4MF2(s); ZK4MF(s, R12, Z2)
#define ZK4MF4(s) ZK4MF3(s); ZK4MF(s, R13, Z3)
#define ZK4M1(s) ZK4MA(s, DI, Z0)
#define ZK4M2(s) ZK4M1(s); ZK4MA(s, R10, Z1)
#define ZK4M3(s) ZK4M2(s); ZK4MA(s, R12, Z2)
#define ZK4M4(s) ZK4M3(s); ZK4MA(s, R13, Z3)

// ZK4MINS: K4MINS with U_0..U_3 in Z24-Z27 and the shuffles in Z23, Z28.
#define ZK4MQ(U, q, A, B) K4MINQ(Z23, Z28, U, Z13, q, A, B)
#define ZK4MINS(MF, M) ZK4MQ(Z24, 0, MF, M); ZK4MQ(Z25, 1, M, M); ZK4MQ(Z26, 2, M, M); ZK4MQ(Z27, 3, M, M)

// ZK4FOLD: K4FOLD with d in Z12 and dmin in Z13.
#define ZK4FOLD(P, macc, iacc, facc) K4FOLDR(P, macc, iacc, facc, Z12, Z13, Z14)

#define ZK4FOLD1 ZK4FOLD(DI, Z0, Z4, Z8)
#define ZK4FOLD2 ZK4FOLD1; ZK4FOLD(R10, Z1, Z5, Z9)
#define ZK4FOLD3 ZK4FOLD2; ZK4FOLD(R12, Z2, Z6, Z10)
#define ZK4FOLD4 ZK4FOLD3; ZK4FOLD(R13, Z3, Z7, Z11)

#define ZK4BLOCK(Z, C, SF, S, MF, M, FOLD) \
	ZK4UNPACK;                                                    \
	K4SUBS(ZK4SUB, Z24, Z25, Z26, Z27, Z20, Z21, Z, C, C, SF, S); \
	ZK4MINS(MF, M);                                               \
	ZKHALF(0, Z12, Y12, X12);                                     \
	ZKHALF(16, Z13, Y13, X13);                                    \
	FOLD;                                                         \
	KPF2((SI));                                                   \
	KPF2((SI)(R14*1));                                            \
	KP_NEXT(1152)

#define ZK4B1 ZK4BLOCK(ZK4Z1, ZK4C1, ZK4SF1, ZK4S1, ZK4MF1, ZK4M1, ZK4FOLD1)
#define ZK4B2 ZK4BLOCK(ZK4Z2, ZK4C2, ZK4SF2, ZK4S2, ZK4MF2, ZK4M2, ZK4FOLD2)
#define ZK4B3 ZK4BLOCK(ZK4Z3, ZK4C3, ZK4SF3, ZK4S3, ZK4MF3, ZK4M3, ZK4FOLD3)
#define ZK4B4 ZK4BLOCK(ZK4Z4, ZK4C4, ZK4SF4, ZK4S4, ZK4MF4, ZK4M4, ZK4FOLD4)

// func q4KPanel2VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)
// np even.
TEXT ·q4KPanel2VNNI(SB), NOSPLIT, $0-64
	ZKP_PROLOGUE(1152, 0x0f0f0f0f)
	VBROADCASTI64X4  ·vk4sc+0(SB), Z20
	VBROADCASTI64X4  ·vk4sc+32(SB), Z21
	VBROADCASTI64X4  ·k4m30(SB), Z22
	VBROADCASTI64X4  ·k4dup+32(SB), Z23
	VBROADCASTI64X4  ·k4dup+96(SB), Z28
	ZKP_KERNEL(ZK4B1, ZK4B2, ZK4B3, ZK4B4, Z8, Z9, Z10, Z11, zk4p, zk4n1, zk4n2, zk4n3, zk4n4, zk4done, zk4next)

// ---------------------------------------------------------------------------------------------
// Q6_K on zmm: q6KPanelVNNI (packed_k_vnni_amd64.s) for two panels at once, as the Q4_K kernel
// above. A group's three level chunks P, Q, R are loaded (and inserted) once into Z26, Z27, Z29
// and decoded from there: the same values as Q6DA and Q6DB, so the same sums and results.
//
// Z0-Z3, Z16-Z19, Z20-Z23: the super-block's int32 sums of columns 0-3 (as VQ6C1); Z4-Z7:
// results; Z8: the scale pairs, then −32 times them; Z9: the group's scale pair; Z10, Z11: two
// level vectors; Z12, Z13: scratch; Z14: d; Z15: 0x3f bytes; Z24, Z25: q6dup+0, q6dup+32.

#define ZQ6X(off, P, acc) Q6PROD(off, P, Z10, Z11, Z12, Z13); VPDPWSSD Z9, Z12, acc

#define ZQ6C1(off, a0, a1, a2, a3) ZQ6X(off, DI, a0)
#define ZQ6C2(off, a0, a1, a2, a3) ZQ6C1(off, a0, a1, a2, a3); ZQ6X(off, R10, a1)
#define ZQ6C3(off, a0, a1, a2, a3) ZQ6C2(off, a0, a1, a2, a3); ZQ6X(off, R12, a2)
#define ZQ6C4(off, a0, a1, a2, a3) ZQ6C3(off, a0, a1, a2, a3); ZQ6X(off, R13, a3)

// ZQ6DA and ZQ6DB: Q6DA and Q6DB from the chunks in Z26 (P), Z27 (Q), Z29 (R).
#define ZQ6DA \
	VPANDD Z15, Z26, Z10; \
	VPANDD Z15, Z27, Z11

#define ZQ6DB \
	VPANDD  Z15, Z29, Z10; \
	VPANDND Z26, Z15, Z11; \
	VPSRLW  $2, Z11, Z11;  \
	VPANDND Z27, Z15, Z12; \
	VPORD   Z12, Z11, Z11; \
	VPSRLW  $2, Z11, Z11;  \
	VPANDND Z29, Z15, Z12; \
	VPORD   Z12, Z11, Z11; \
	VPSRLW  $2, Z11, Z11

#define ZQ6UNIT(u, C) \
	ZKLOAD(144+96*u, Z26, Y26); \
	ZKLOAD(176+96*u, Z27, Y27); \
	ZKLOAD(208+96*u, Z29, Y29); \
	ZQ6DA;                      \
	C(4+16*u, Z0, Z1, Z2, Z3);  \
	ZQ6DB;                      \
	C(12+16*u, Z16, Z17, Z18, Z19)

#define ZQ6O(i, P, acc) VPDPWSSD.BCST 260+4*i(P), Z8, acc

#define ZQ6O1(i) ZQ6O(i, DI, Z20)
#define ZQ6O2(i) ZQ6O1(i); ZQ6O(i, R10, Z21)
#define ZQ6O3(i) ZQ6O2(i); ZQ6O(i, R12, Z22)
#define ZQ6O4(i) ZQ6O3(i); ZQ6O(i, R13, Z23)

// ZQ6P runs groups u0 = 2i and u1 = 2i+1; the scale pairs of both panels' 8 rows are the 16
// bytes at 16+16i of each, sign-extended to words.
#define ZQ6P(i, u0, u1, C, O) \
	PREFETCHT0  KPF+144+192*i(SI);        \
	PREFETCHT0  KPF+208+192*i(SI);        \
	PREFETCHT0  KPF+272+192*i(SI);        \
	PREFETCHT0  KPF+144+192*i(SI)(R14*1); \
	PREFETCHT0  KPF+208+192*i(SI)(R14*1); \
	PREFETCHT0  KPF+272+192*i(SI)(R14*1); \
	VMOVDQU     16+16*i(SI), X8;          \
	VINSERTI128 $1, 16+16*i(SI)(R14*1), Y8, Y8; \
	VPMOVSXBW   Y8, Z8;                   \
	VPSHUFB     Z24, Z8, Z9;              \
	ZQ6UNIT(u0, C);                       \
	VPSHUFB     Z25, Z8, Z9;              \
	ZQ6UNIT(u1, C);                       \
	VPSLLW      $5, Z8, Z8;               \
	VPXORD      Z13, Z13, Z13;            \
	VPSUBW      Z8, Z13, Z8;              \
	O(i)

#define ZQ6ZC(a, b, c) VPXORD a, a, a; VPXORD b, b, b; VPXORD c, c, c
#define ZQ6Z1 ZQ6ZC(Z0, Z16, Z20)
#define ZQ6Z2 ZQ6Z1; ZQ6ZC(Z1, Z17, Z21)
#define ZQ6Z3 ZQ6Z2; ZQ6ZC(Z2, Z18, Z22)
#define ZQ6Z4 ZQ6Z3; ZQ6ZC(Z3, Z19, Z23)

#define ZQ6FOLD(P, iacc, facc) Q6FOLDR(P, iacc, facc, Z14, Z12)

#define ZQ6FOLD1 Q6SUM3(Z0, Z16, Z20); ZQ6FOLD(DI, Z0, Z4)
#define ZQ6FOLD2 ZQ6FOLD1; Q6SUM3(Z1, Z17, Z21); ZQ6FOLD(R10, Z1, Z5)
#define ZQ6FOLD3 ZQ6FOLD2; Q6SUM3(Z2, Z18, Z22); ZQ6FOLD(R12, Z2, Z6)
#define ZQ6FOLD4 ZQ6FOLD3; Q6SUM3(Z3, Z19, Z23); ZQ6FOLD(R13, Z3, Z7)

#define ZQ6BLOCK(Z, C, O, FOLD) \
	Z;                             \
	Q6PAIRS(ZQ6P, C, O);           \
	ZKHALF(0, Z14, Y14, X14);      \
	FOLD;                          \
	KPF3((SI));                    \
	KPF3((SI)(R14*1));             \
	KP_NEXT(1680)

#define ZQ6B1 ZQ6BLOCK(ZQ6Z1, ZQ6C1, ZQ6O1, ZQ6FOLD1)
#define ZQ6B2 ZQ6BLOCK(ZQ6Z2, ZQ6C2, ZQ6O2, ZQ6FOLD2)
#define ZQ6B3 ZQ6BLOCK(ZQ6Z3, ZQ6C3, ZQ6O3, ZQ6FOLD3)
#define ZQ6B4 ZQ6BLOCK(ZQ6Z4, ZQ6C4, ZQ6O4, ZQ6FOLD4)

// func q6KPanel2VNNI(np, nb int, w, x *byte, xStride, nx int, out *float32, outStride int)
// np even.
TEXT ·q6KPanel2VNNI(SB), NOSPLIT, $0-64
	ZKP_PROLOGUE(1680, 0x3f3f3f3f)
	VBROADCASTI64X4 ·q6dup+0(SB), Z24
	VBROADCASTI64X4 ·q6dup+32(SB), Z25
	ZKP_KERNEL(ZQ6B1, ZQ6B2, ZQ6B3, ZQ6B4, Z4, Z5, Z6, Z7, zq6p, zq6n1, zq6n2, zq6n3, zq6n4, zq6done, zq6next)
