#include "textflag.h"
#include "dot_arm64.h"

// NEON integer part of the Q4_K dot (see dot_q4k_arm64.go): the eight sub-block dots of one
// super-block's 4-bit levels with one Q8_K activation super-block, and those of IQ4_XS. The
// int8 dots and the reduction are the macros of dot_arm64.h.
//
// Registers: R0 the 128 bytes of levels, R1 the 256 activation quants, R2 the eight int32 out;
// V30 holds 0x0f in every byte; V8:V9 the 32 level bytes of a 64-element group, V0:V1 and V2:V3
// the operands of the int8 dot (result V16), V20-V27 the eight sub-block partial sums.

// GROUP does one 64-element group: the low nibbles against the next 32 activations into lo, the
// high nibbles against the 32 after into hi.
#define GROUP(IDOT, lo, hi) \
	VLD1.P	32(R0), [V8.B16, V9.B16]; \
	VLD1.P	32(R1), [V2.B16, V3.B16]; \
	VLD1.P	32(R1), [V12.B16, V13.B16]; \
	VAND	V30.B16, V8.B16, V0.B16; \
	VAND	V30.B16, V9.B16, V1.B16; \
	IDOT; \
	VMOV	V16.B16, lo.B16; \
	VUSHR	$4, V8.B16, V0.B16; \
	VUSHR	$4, V9.B16, V1.B16; \
	VMOV	V12.B16, V2.B16; \
	VMOV	V13.B16, V3.B16; \
	IDOT; \
	VMOV	V16.B16, hi.B16

// IQ4_XS: the eight 32-element sub-blocks of a super-block, each 16 bytes of nibbles (low
// nibbles elements 0-15, high 16-31) looked up in the table of 16 int8 values in V28 (VTBL).

// SUBXS dots the next sub-block's levels (R0) with the next 32 activations (R1) into dst.
#define SUBXS(IDOT, dst) \
	VLD1.P	16(R0), [V8.B16]; \
	VLD1.P	32(R1), [V2.B16, V3.B16]; \
	VAND	V30.B16, V8.B16, V0.B16; \
	VUSHR	$4, V8.B16, V1.B16; \
	VTBL	V0.B16, [V28.B16], V0.B16; \
	VTBL	V1.B16, [V28.B16], V1.B16; \
	IDOT; \
	VMOV	V16.B16, dst.B16

#define XSBODY(IDOT) \
	MOVD	qs+0(FP), R0; \
	MOVD	xq+8(FP), R1; \
	MOVD	tab+16(FP), R3; \
	MOVD	out+24(FP), R2; \
	VLD1	(R3), [V28.B16]; \
	VMOVI	$15, V30.B16; \
	SUBXS(IDOT, V20); \
	SUBXS(IDOT, V21); \
	SUBXS(IDOT, V22); \
	SUBXS(IDOT, V23); \
	SUBXS(IDOT, V24); \
	SUBXS(IDOT, V25); \
	SUBXS(IDOT, V26); \
	SUBXS(IDOT, V27); \
	SUMS8

// Q4KBODY is the Q4_K kernel with the int8 dot IDOT.
#define Q4KBODY(IDOT) \
	MOVD	qs+0(FP), R0; \
	MOVD	xq+8(FP), R1; \
	MOVD	out+16(FP), R2; \
	VMOVI	$15, V30.B16; \
	GROUP(IDOT, V20, V21); \
	GROUP(IDOT, V22, V23); \
	GROUP(IDOT, V24, V25); \
	GROUP(IDOT, V26, V27); \
	SUMS8

// func q4KDotsNEON(qs, xq *byte, out *[8]int32)
// func q4KDotsSDOT(qs, xq *byte, out *[8]int32)
KERNELS32(·q4KDotsNEON, ·q4KDotsSDOT, $0-24, Q4KBODY)

// func iq4XSDotsNEON(qs, xq, tab *byte, out *[8]int32)
// func iq4XSDotsSDOT(qs, xq, tab *byte, out *[8]int32)
KERNELS32(·iq4XSDotsNEON, ·iq4XSDotsSDOT, $0-32, XSBODY)

