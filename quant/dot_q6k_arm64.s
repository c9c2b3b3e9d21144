#include "textflag.h"
#include "dot_arm64.h"

// NEON integer part of the Q6_K dot (see dot_q6k_arm64.go): the sixteen 16-element group dots of
// one super-block's 6-bit levels (q-32 in [-32, 31]) with one Q8_K activation super-block. The
// int8 dots and the reduction are the macros of dot_arm64.h.
//
// Layout of a 128-element half h of the block: ql[64h:64h+64] (V8-V11, 16 bytes each) and
// qh[32h:32h+32] (V12, V13). Element l < 32 of group pair i = l/16 takes, in order of the eight
// groups: ql0|qh0<<4, ql1|qh1<<4, ql2|qh0<<2, ql3|qh1<<2 with the low nibbles of ql, then the
// same four with the high nibbles and qh, qh>>2; the two high bits masked to 0x30 and 32
// subtracted (wrapping bytes give the int8 pattern of q-32).
//
// Registers: R0 ql, R3 qh, R1 activation quants, R2 out; V29 = 0x0f, V30 = 0x30, V31 = 32 in
// every byte; V0 the group's levels, V1 its high bits, V2 its activations, V16 the group's
// four partial sums, V20-V23 four groups' partial sums.

// GROUP dots the levels in V0 (low 4 bits) and V1 (high bits, before masking) with the next 16
// activations into dst.
#define GROUP(IDOT, dst) \
	VAND	V30.B16, V1.B16, V1.B16; \
	VORR	V1.B16, V0.B16, V0.B16; \
	VSUB	V31.B16, V0.B16, V0.B16; \
	VLD1.P	16(R1), [V2.B16]; \
	IDOT; \
	VMOV	V16.B16, dst.B16

// A group's levels: LO (HI) puts the low (high) nibbles of ql in V0; SHL4 (SHL2, SHR0, SHR2)
// moves bits 0-1 (2-3, 4-5, 6-7) of qh to bits 4-5 of V1 (GROUP masks the rest).
#define LO(ql) VAND V29.B16, ql.B16, V0.B16
#define HI(ql) VUSHR $4, ql.B16, V0.B16
#define SHL4(qh) VSHL $4, qh.B16, V1.B16
#define SHL2(qh) VSHL $2, qh.B16, V1.B16
#define SHR0(qh) VMOV qh.B16, V1.B16
#define SHR2(qh) VUSHR $2, qh.B16, V1.B16

// G dots the group whose levels are NIB of ql and HB of qh into dst.
#define G(IDOT, NIB, ql, HB, qh, dst) \
	NIB(ql); \
	HB(qh); \
	GROUP(IDOT, dst)

// HALF does the eight groups of one 128-element half.
#define HALF(IDOT) \
	VLD1.P	64(R0), [V8.B16, V9.B16, V10.B16, V11.B16]; \
	VLD1.P	32(R3), [V12.B16, V13.B16]; \
	G(IDOT, LO, V8, SHL4, V12, V20); \
	G(IDOT, LO, V9, SHL4, V13, V21); \
	G(IDOT, LO, V10, SHL2, V12, V22); \
	G(IDOT, LO, V11, SHL2, V13, V23); \
	RED4; \
	G(IDOT, HI, V8, SHR0, V12, V20); \
	G(IDOT, HI, V9, SHR0, V13, V21); \
	G(IDOT, HI, V10, SHR2, V12, V22); \
	G(IDOT, HI, V11, SHR2, V13, V23); \
	RED4

// BODY is the Q6_K kernel with the int8 dot IDOT.
#define BODY(IDOT) \
	MOVD	blk+0(FP), R0; \
	MOVD	xq+8(FP), R1; \
	MOVD	out+16(FP), R2; \
	ADD	$128, R0, R3; \
	VMOVI	$15, V29.B16; \
	VMOVI	$48, V30.B16; \
	VMOVI	$32, V31.B16; \
	HALF(IDOT); \
	HALF(IDOT)

// func q6KDotsNEON(blk, xq *byte, out *[16]int32)
// func q6KDotsSDOT(blk, xq *byte, out *[16]int32)
KERNELS16(·q6KDotsNEON, ·q6KDotsSDOT, $0-24, BODY)
