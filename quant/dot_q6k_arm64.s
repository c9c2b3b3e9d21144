#include "textflag.h"

// NEON integer part of the Q6_K dot (see dot_q6k_arm64.go): the sixteen 16-element group dots of
// one super-block's 6-bit levels (q-32 in [-32, 31]) with one Q8_K activation super-block. The
// int8 dot encodings are those of dot_q8_arm64.s (assembler macros do not cross files).
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

#define IDOT_SMULL \
	WORD	$0x0e22c004 /* smull  v4.8h, v0.8b, v2.8b */; \
	WORD	$0x4e22c005 /* smull2 v5.8h, v0.16b, v2.16b */; \
	WORD	$0x4e602890 /* saddlp v16.4s, v4.8h */; \
	WORD	$0x4e6068b0 /* sadalp v16.4s, v5.8h */

#define IDOT_SDOT \
	VEOR	V16.B16, V16.B16, V16.B16; \
	WORD	$0x4e829410 /* sdot v16.4s, v0.16b, v2.16b */

// GROUP dots the levels in V0 (low 4 bits) and V1 (high bits, before masking) with the next 16
// activations into dst.
#define GROUP(IDOT, dst) \
	VAND	V30.B16, V1.B16, V1.B16; \
	VORR	V1.B16, V0.B16, V0.B16; \
	VSUB	V31.B16, V0.B16, V0.B16; \
	VLD1.P	16(R1), [V2.B16]; \
	IDOT; \
	VMOV	V16.B16, dst.B16

// RED4 reduces V20-V23 to their four sums and stores them at R2, advancing it.
#define RED4 \
	VADDP	V21.S4, V20.S4, V24.S4; \
	VADDP	V23.S4, V22.S4, V25.S4; \
	VADDP	V25.S4, V24.S4, V24.S4; \
	VST1.P	[V24.S4], 16(R2)

// HALF does the eight groups of one 128-element half.
#define HALF(IDOT) \
	VLD1.P	64(R0), [V8.B16, V9.B16, V10.B16, V11.B16]; \
	VLD1.P	32(R3), [V12.B16, V13.B16]; \
	VAND	V29.B16, V8.B16, V0.B16; \
	VSHL	$4, V12.B16, V1.B16; \
	GROUP(IDOT, V20); \
	VAND	V29.B16, V9.B16, V0.B16; \
	VSHL	$4, V13.B16, V1.B16; \
	GROUP(IDOT, V21); \
	VAND	V29.B16, V10.B16, V0.B16; \
	VSHL	$2, V12.B16, V1.B16; \
	GROUP(IDOT, V22); \
	VAND	V29.B16, V11.B16, V0.B16; \
	VSHL	$2, V13.B16, V1.B16; \
	GROUP(IDOT, V23); \
	RED4; \
	VUSHR	$4, V8.B16, V0.B16; \
	VMOV	V12.B16, V1.B16; \
	GROUP(IDOT, V20); \
	VUSHR	$4, V9.B16, V0.B16; \
	VMOV	V13.B16, V1.B16; \
	GROUP(IDOT, V21); \
	VUSHR	$4, V10.B16, V0.B16; \
	VUSHR	$2, V12.B16, V1.B16; \
	GROUP(IDOT, V22); \
	VUSHR	$4, V11.B16, V0.B16; \
	VUSHR	$2, V13.B16, V1.B16; \
	GROUP(IDOT, V23); \
	RED4

#define SETUP \
	MOVD	blk+0(FP), R0; \
	MOVD	xq+8(FP), R1; \
	MOVD	out+16(FP), R2; \
	ADD	$128, R0, R3; \
	VMOVI	$15, V29.B16; \
	VMOVI	$48, V30.B16; \
	VMOVI	$32, V31.B16

// func q6KDotsNEON(blk, xq *byte, out *[16]int32)
TEXT ·q6KDotsNEON(SB), NOSPLIT, $0-24
	SETUP
	HALF(IDOT_SMULL)
	HALF(IDOT_SMULL)
	RET

// func q6KDotsSDOT(blk, xq *byte, out *[16]int32)
TEXT ·q6KDotsSDOT(SB), NOSPLIT, $0-24
	SETUP
	HALF(IDOT_SDOT)
	HALF(IDOT_SDOT)
	RET
