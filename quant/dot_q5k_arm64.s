#include "textflag.h"
#include "dot_arm64.h"

// NEON integer part of the Q5_K dot (see dot_q5k_arm64.go): the eight sub-block dots of one
// super-block's 5-bit levels with one Q8_K activation super-block. As Q4_K (dot_q4k_arm64.s),
// with the fifth bit of element l of sub-block s in bit s of qh[l]: VCMTST against a one-bit
// mask turns it into 0xff, masked to 0x10 and ORed into the nibble. The int8 dots and the
// reduction are the macros of dot_arm64.h.
//
// Registers: R0 the 128 bytes of qs, R1 the 256 activation quants, R2 the eight int32 out, R3 qh;
// V30 = 0x0f, V29 = 0x10 in every byte, V14:V15 the 32 qh bytes, V28 the current bit mask;
// V8:V9 the 32 qs bytes of a 64-element group, V10:V11 the fifth bits, V0:V1 and V2:V3 the
// int8 dot operands (result V16), V20-V27 the eight sub-block partial sums.

// HIBITS sets V10:V11 to 0x10 where qh (V14:V15) has the bit of mask (an immediate) set.
#define HIBITS(mask) \
	VMOVI	mask, V28.B16; \
	BITS(V28, V14, V15)

// GROUP does one 64-element group: low nibbles with fifth bit mlo against the next 32
// activations into lo, high nibbles with bit mhi against the 32 after into hi.
#define GROUP(IDOT, mlo, mhi, lo, hi) \
	VLD1.P	32(R0), [V8.B16, V9.B16]; \
	VLD1.P	32(R1), [V2.B16, V3.B16]; \
	VLD1.P	32(R1), [V12.B16, V13.B16]; \
	HIBITS(mlo); \
	VAND	V30.B16, V8.B16, V0.B16; \
	VAND	V30.B16, V9.B16, V1.B16; \
	VORR	V10.B16, V0.B16, V0.B16; \
	VORR	V11.B16, V1.B16, V1.B16; \
	IDOT; \
	VMOV	V16.B16, lo.B16; \
	HIBITS(mhi); \
	VUSHR	$4, V8.B16, V0.B16; \
	VUSHR	$4, V9.B16, V1.B16; \
	VORR	V10.B16, V0.B16, V0.B16; \
	VORR	V11.B16, V1.B16, V1.B16; \
	VMOV	V12.B16, V2.B16; \
	VMOV	V13.B16, V3.B16; \
	IDOT; \
	VMOV	V16.B16, hi.B16

// BODY is the Q5_K kernel with the int8 dot IDOT.
#define BODY(IDOT) \
	MOVD	qh+0(FP), R3; \
	MOVD	qs+8(FP), R0; \
	MOVD	xq+16(FP), R1; \
	MOVD	out+24(FP), R2; \
	VLD1	(R3), [V14.B16, V15.B16]; \
	VMOVI	$15, V30.B16; \
	VMOVI	$16, V29.B16; \
	GROUP(IDOT, $1, $2, V20, V21); \
	GROUP(IDOT, $4, $8, V22, V23); \
	GROUP(IDOT, $16, $32, V24, V25); \
	GROUP(IDOT, $64, $128, V26, V27); \
	SUMS8

// func q5KDotsNEON(qh, qs, xq *byte, out *[8]int32)
// func q5KDotsSDOT(qh, qs, xq *byte, out *[8]int32)
KERNELS32(·q5KDotsNEON, ·q5KDotsSDOT, $0-32, BODY)
