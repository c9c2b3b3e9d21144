#include "textflag.h"

// NEON integer part of the Q4_K dot (see dot_q4k_arm64.go): the eight sub-block dots of one
// super-block's 4-bit levels with one Q8_K activation super-block. The int8 dot macros are
// repeated from dot_q8_arm64.s (assembler macros do not cross files); see there for the WORD
// encodings.
//
// Registers: R0 the 128 bytes of levels, R1 the 256 activation quants, R2 the eight int32 out;
// V30 holds 0x0f in every byte; V8:V9 the 32 level bytes of a 64-element group, V0:V1 and V2:V3
// the operands of the int8 dot (result V16), V20-V27 the eight sub-block partial sums.

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

// SUMS reduces the lanes of V20-V27 pairwise into the eight sums and stores them at R2.
#define SUMS \
	VADDP	V21.S4, V20.S4, V28.S4; \
	VADDP	V23.S4, V22.S4, V29.S4; \
	VADDP	V29.S4, V28.S4, V28.S4; \
	VADDP	V25.S4, V24.S4, V29.S4; \
	VADDP	V27.S4, V26.S4, V31.S4; \
	VADDP	V31.S4, V29.S4, V29.S4; \
	VST1	[V28.S4, V29.S4], (R2)

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
	SUMS

// func q4KDotsNEON(qs, xq *byte, out *[8]int32)
TEXT ·q4KDotsNEON(SB), NOSPLIT, $0-24
	MOVD	qs+0(FP), R0
	MOVD	xq+8(FP), R1
	MOVD	out+16(FP), R2
	VMOVI	$15, V30.B16
	GROUP(IDOT_SMULL, V20, V21)
	GROUP(IDOT_SMULL, V22, V23)
	GROUP(IDOT_SMULL, V24, V25)
	GROUP(IDOT_SMULL, V26, V27)
	SUMS
	RET

// func q4KDotsSDOT(qs, xq *byte, out *[8]int32)
TEXT ·q4KDotsSDOT(SB), NOSPLIT, $0-24
	MOVD	qs+0(FP), R0
	MOVD	xq+8(FP), R1
	MOVD	out+16(FP), R2
	VMOVI	$15, V30.B16
	GROUP(IDOT_SDOT, V20, V21)
	GROUP(IDOT_SDOT, V22, V23)
	GROUP(IDOT_SDOT, V24, V25)
	GROUP(IDOT_SDOT, V26, V27)
	SUMS
	RET

// func iq4XSDotsNEON(qs, xq, tab *byte, out *[8]int32)
TEXT ·iq4XSDotsNEON(SB), NOSPLIT, $0-32
	XSBODY(IDOT_SMULL)
	RET

// func iq4XSDotsSDOT(qs, xq, tab *byte, out *[8]int32)
TEXT ·iq4XSDotsSDOT(SB), NOSPLIT, $0-32
	XSBODY(IDOT_SDOT)
	RET
