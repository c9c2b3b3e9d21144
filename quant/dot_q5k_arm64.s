#include "textflag.h"

// NEON integer part of the Q5_K dot (see dot_q5k_arm64.go): the eight sub-block dots of one
// super-block's 5-bit levels with one Q8_K activation super-block. As Q4_K (dot_q4k_arm64.s),
// with the fifth bit of element l of sub-block s in bit s of qh[l]: VCMTST against a one-bit
// mask turns it into 0xff, masked to 0x10 and ORed into the nibble. The int8 dot encodings are
// those of dot_q8_arm64.s.
//
// Registers: R0 the 128 bytes of qs, R1 the 256 activation quants, R2 the eight int32 out, R3 qh;
// V30 = 0x0f, V29 = 0x10 in every byte, V14:V15 the 32 qh bytes, V28 the current bit mask;
// V8:V9 the 32 qs bytes of a 64-element group, V10:V11 the fifth bits, V0:V1 and V2:V3 the
// int8 dot operands (result V16), V20-V27 the eight sub-block partial sums.

#define IDOT_SMULL \
	WORD	$0x0e22c004 /* smull  v4.8h, v0.8b, v2.8b */; \
	WORD	$0x4e22c005 /* smull2 v5.8h, v0.16b, v2.16b */; \
	WORD	$0x0e23c026 /* smull  v6.8h, v1.8b, v3.8b */; \
	WORD	$0x4e23c027 /* smull2 v7.8h, v1.16b, v3.16b */; \
	WORD	$0x4e602890 /* saddlp v16.4s, v4.8h */; \
	WORD	$0x4e6068b0 /* sadalp v16.4s, v5.8h */; \
	WORD	$0x4e6068d0 /* sadalp v16.4s, v6.8h */; \
	WORD	$0x4e6068f0 /* sadalp v16.4s, v7.8h */

#define IDOT_SDOT \
	VEOR	V16.B16, V16.B16, V16.B16; \
	WORD	$0x4e829410 /* sdot v16.4s, v0.16b, v2.16b */; \
	WORD	$0x4e839430 /* sdot v16.4s, v1.16b, v3.16b */

// HIBITS sets V10:V11 to 0x10 where qh (V14:V15) has the bit of mask (an immediate) set.
#define HIBITS(mask) \
	VMOVI	mask, V28.B16; \
	VCMTST	V28.B16, V14.B16, V10.B16; \
	VCMTST	V28.B16, V15.B16, V11.B16; \
	VAND	V29.B16, V10.B16, V10.B16; \
	VAND	V29.B16, V11.B16, V11.B16

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

#define SUMS \
	VADDP	V21.S4, V20.S4, V28.S4; \
	VADDP	V23.S4, V22.S4, V29.S4; \
	VADDP	V29.S4, V28.S4, V28.S4; \
	VADDP	V25.S4, V24.S4, V29.S4; \
	VADDP	V27.S4, V26.S4, V31.S4; \
	VADDP	V31.S4, V29.S4, V29.S4; \
	VST1	[V28.S4, V29.S4], (R2)

#define SETUP \
	MOVD	qh+0(FP), R3; \
	MOVD	qs+8(FP), R0; \
	MOVD	xq+16(FP), R1; \
	MOVD	out+24(FP), R2; \
	VLD1	(R3), [V14.B16, V15.B16]; \
	VMOVI	$15, V30.B16; \
	VMOVI	$16, V29.B16

// func q5KDotsNEON(qh, qs, xq *byte, out *[8]int32)
TEXT ·q5KDotsNEON(SB), NOSPLIT, $0-32
	SETUP
	GROUP(IDOT_SMULL, $1, $2, V20, V21)
	GROUP(IDOT_SMULL, $4, $8, V22, V23)
	GROUP(IDOT_SMULL, $16, $32, V24, V25)
	GROUP(IDOT_SMULL, $64, $128, V26, V27)
	SUMS
	RET

// func q5KDotsSDOT(qh, qs, xq *byte, out *[8]int32)
TEXT ·q5KDotsSDOT(SB), NOSPLIT, $0-32
	SETUP
	GROUP(IDOT_SDOT, $1, $2, V20, V21)
	GROUP(IDOT_SDOT, $4, $8, V22, V23)
	GROUP(IDOT_SDOT, $16, $32, V24, V25)
	GROUP(IDOT_SDOT, $64, $128, V26, V27)
	SUMS
	RET
