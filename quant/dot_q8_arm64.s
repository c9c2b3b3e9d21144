#include "textflag.h"
#include "dot_arm64.h"

// NEON kernels for one Q8_0 activation row against one Q4_0, Q8_0, Q5_0, IQ4_NL, MXFP4, Q4_1 or
// Q5_1 weight row (see dot_q8_arm64.go); the int8 dots are the macros of dot_arm64.h. Go's assembler
// has no mnemonics for the vector int→float conversion and the pairwise float adds either, so
// those are WORD encodings too, each with the instruction it encodes (GNU syntax).
//
// Registers: R0 blocks left, R1 weight block, R2 activation block, R4/R5 the f16 scales;
// V0, V1 the 32 weight quants of a block (int8), V2, V3 the 32 activation quants; V16 the
// block's four int32 partial sums; V20 the four float partial sums of the row.

// BLOCKSCALE multiplies the block's partial sums V16 (int32) by d_w·d_x (R4, R5: f16 bits) and
// adds them to V20; the four lanes stay separate until the end.
#define BLOCKSCALE \
	WORD	$0x4e21da10 /* scvtf v16.4s, v16.4s (each lane at most 8·2^14: exact) */; \
	FMOVS	R4, F17; \
	FMOVS	R5, F18; \
	FCVTHS	F17, F17; \
	FCVTHS	F18, F18; \
	FMULS	F18, F17, F17; \
	VDUP	V17.S[0], V19.S4; \
	VFMLA	V19.S4, V16.S4, V20.S4

// HSUM sets F0 to the sum of V20's lanes, ((a0+a1)+(a2+a3)).
#define HSUM \
	WORD	$0x6e34d694 /* faddp v20.4s, v20.4s, v20.4s */; \
	WORD	$0x7e30da80 /* faddp s0, v20.2s */

// LOADX loads the activation block at R2 (scale R5, quants V2:V3) and advances R2 to the next.
#define LOADX \
	MOVHU	(R2), R5; \
	ADD	$2, R2, R7; \
	VLD1	(R7), [V2.B16, V3.B16]; \
	ADD	$34, R2

// LOADQ8 loads the Q8_0 weight block at R1 (scale R4, quants V0:V1) and advances R1.
#define LOADQ8 \
	MOVHU	(R1), R4; \
	ADD	$2, R1, R6; \
	VLD1	(R6), [V0.B16, V1.B16]; \
	ADD	$34, R1

// NIBBLES loads the 16 bytes at R6 (V8) and splits them into the low nibbles in V0 (elements
// 0-15 of a block) and the high ones in V1 (16-31). V30 holds 0x0f.
#define NIBBLES \
	VLD1	(R6), [V8.B16]; \
	VAND	V30.B16, V8.B16, V0.B16; \
	VUSHR	$4, V8.B16, V1.B16

// LEVELS5 is NIBBLES with the fifth bits of the 32 bits in V9.S[0] ORed in as 0x10: VTBL with
// the indexes V24 (8 zeros, 8 ones) and V25 (8 twos, 8 threes) gives every element its qh byte,
// BITS with V26 (1, 2, 4, ..., 128 twice) its bit. V29 = 0x10.
#define LEVELS5 \
	NIBBLES; \
	VTBL	V24.B16, [V9.B16], V10.B16; \
	VTBL	V25.B16, [V9.B16], V11.B16; \
	BITS(V26, V10, V11); \
	VORR	V10.B16, V0.B16, V0.B16; \
	VORR	V11.B16, V1.B16, V1.B16

// LOADQ4 loads the Q4_0 weight block at R1 (scale R4) and expands its nibbles to levels q-8 in
// V0 (low nibbles: elements 0-15) and V1 (high nibbles: 16-31); V30 holds 0x0f, V31 holds 8 in
// every byte. R1 advances to the next block.
#define LOADQ4 \
	MOVHU	(R1), R4; \
	ADD	$2, R1, R6; \
	NIBBLES; \
	VSUB	V31.B16, V0.B16, V0.B16; \
	VSUB	V31.B16, V1.B16, V1.B16; \
	ADD	$18, R1

// LOADIQ4 loads the IQ4_NL weight block at R1 (scale R4; the layout of Q4_0) and looks its
// nibbles up in the table of 16 int8 values in V28: V0 elements 0-15, V1 16-31. V30 holds 0x0f.
#define LOADIQ4 \
	MOVHU	(R1), R4; \
	ADD	$2, R1, R6; \
	NIBBLES; \
	VTBL	V0.B16, [V28.B16], V0.B16; \
	VTBL	V1.B16, [V28.B16], V1.B16; \
	ADD	$18, R1

// LOADMX loads the MXFP4 weight block at R1 (scale byte e, then the codes in the layout of
// Q4_0's) and looks its codes up in mxfp4Values, in V28: V0 elements 0-15, V1 16-31. V30 holds
// 0x0f. R4 gets the float bits of the scale 2^(e-128) (ggml's GGML_E8M0_TO_FP32_HALF, exactly):
// (e-1)<<23, or the subnormal 0x00200000<<e for e < 2.
#define LOADMX \
	MOVBU	(R1), R4; \
	ADD	$1, R1, R6; \
	NIBBLES; \
	VTBL	V0.B16, [V28.B16], V0.B16; \
	VTBL	V1.B16, [V28.B16], V1.B16; \
	SUB	$1, R4, R8; \
	LSL	$23, R8, R8; \
	MOVW	$0x00200000, R9; \
	LSL	R4, R9, R9; \
	CMP	$2, R4; \
	CSEL	LO, R9, R8, R4; \
	ADD	$17, R1

// BLOCKSCALEMX is BLOCKSCALE with the weight scale in R4 as float32 bits (LOADMX).
#define BLOCKSCALEMX \
	WORD	$0x4e21da10 /* scvtf v16.4s, v16.4s */; \
	FMOVS	R4, F17; \
	FMOVS	R5, F18; \
	FCVTHS	F18, F18; \
	FMULS	F18, F17, F17; \
	VDUP	V17.S[0], V19.S4; \
	VFMLA	V19.S4, V16.S4, V20.S4

// LOADQ5 loads the Q5_0 weight block at R1 (f16 d, 32 bits qh, 16 bytes qs) and expands it to
// levels (nibble | bit<<4) - 16 in V0 (elements 0-15, bits 0-15 of qh) and V1 (16-31) with
// LEVELS5. V31 = 16.
#define LOADQ5 \
	MOVHU	(R1), R4; \
	MOVWU	2(R1), R6; \
	VMOV	R6, V9.S[0]; \
	ADD	$6, R1, R6; \
	LEVELS5; \
	VSUB	V31.B16, V0.B16, V0.B16; \
	VSUB	V31.B16, V1.B16, V1.B16; \
	ADD	$22, R1

// BLOCKSCALEMIN adds a block of a type with a min (value d·l + m) to V20: d_x·(d·(l·x) + m·Σx),
// with the four partial dots in V16, d in R4, m in R8 and d_x in R5 (f16 bits). It first sums
// the activation quants V2:V3 into four int32 lanes (V17).
#define BLOCKSCALEMIN \
	WORD	$0x4e202851 /* saddlp v17.8h, v2.16b */; \
	WORD	$0x4e206871 /* sadalp v17.8h, v3.16b */; \
	WORD	$0x4e602a31 /* saddlp v17.4s, v17.8h */; \
	WORD	$0x4e21da10 /* scvtf v16.4s, v16.4s */; \
	WORD	$0x4e21da31 /* scvtf v17.4s, v17.4s */; \
	FMOVS	R4, F18; \
	FMOVS	R8, F19; \
	FMOVS	R5, F21; \
	FCVTHS	F18, F18; \
	FCVTHS	F19, F19; \
	FCVTHS	F21, F21; \
	VDUP	V18.S[0], V18.S4; \
	VDUP	V19.S[0], V19.S4; \
	VDUP	V21.S[0], V21.S4; \
	WORD	$0x6e32de10 /* fmul v16.4s, v16.4s, v18.4s */; \
	VFMLA	V19.S4, V17.S4, V16.S4; \
	VFMLA	V21.S4, V16.S4, V20.S4

// LOADQ41 loads the Q4_1 weight block at R1 (f16 d in R4, f16 m in R8, 16 bytes qs) as levels
// 0-15 in V0 (low nibbles: elements 0-15) and V1 (high nibbles). V30 holds 0x0f.
#define LOADQ41 \
	MOVHU	(R1), R4; \
	MOVHU	2(R1), R8; \
	ADD	$4, R1, R6; \
	NIBBLES; \
	ADD	$20, R1

// LOADQ51 loads the Q5_1 weight block at R1 (f16 d in R4, f16 m in R8, 32 bits qh, 16 bytes qs)
// as levels nibble | bit<<4 in V0, V1 (LEVELS5).
#define LOADQ51 \
	MOVHU	(R1), R4; \
	MOVHU	2(R1), R8; \
	MOVWU	4(R1), R6; \
	VMOV	R6, V9.S[0]; \
	ADD	$8, R1, R6; \
	LEVELS5; \
	ADD	$24, R1

// DOTBODY sums nb (R0) blocks of weights (R1, read by LOAD) times activations (R2) into F0;
// SCALE is BLOCKSCALE, or BLOCKSCALEMIN for the types with a min.
#define DOTBODY(LOAD, IDOT, SCALE) \
	VEOR	V20.B16, V20.B16, V20.B16; \
	CBZ	R0, done; \
loop: \
	LOAD; \
	LOADX; \
	IDOT; \
	SCALE; \
	SUB	$1, R0; \
	CBNZ	R0, loop; \
done: \
	HSUM

// The functions take (nb int, w, x, c *byte): nb blocks of weights at w and activations at x;
// c is a table of constants for the types that need one (IQ4_NL, MXFP4: their 16 values; Q5_0, Q5_1: the
// VTBL indexes and bit masks of LOADQ5), unused by the others. Each type has a NEON function
// (IDOT_SMULL) and an SDOT one (IDOT_SDOT), which differ in nothing else.

// Setups: the arguments (ARGS, with the table in R3 for ARGSC) and each type's constants.
#define ARGS \
	MOVD	nb+0(FP), R0; \
	MOVD	w+8(FP), R1; \
	MOVD	x+16(FP), R2

#define ARGSC \
	ARGS; \
	MOVD	c+24(FP), R3

#define SETUP_Q8 ARGS
#define SETUP_Q4 ARGS; VMOVI $15, V30.B16; VMOVI $8, V31.B16
#define SETUP_IQ4 ARGSC; VLD1 (R3), [V28.B16]; VMOVI $15, V30.B16
#define SETUP_Q5 ARGSC; VLD1 (R3), [V24.B16, V25.B16, V26.B16]; VMOVI $16, V29.B16; VMOVI $15, V30.B16; VMOVI $16, V31.B16
#define SETUP_Q41 ARGS; VMOVI $15, V30.B16
#define SETUP_Q51 ARGSC; VLD1 (R3), [V24.B16, V25.B16, V26.B16]; VMOVI $16, V29.B16; VMOVI $15, V30.B16

// DOTFUNC is one kernel: func name(nb int, w, x, c *byte) float32 (labels are local to a TEXT).
#define DOTFUNC(name, SETUP, LOAD, IDOT, SCALE) \
TEXT name(SB), NOSPLIT, $0-36; \
	SETUP; \
	DOTBODY(LOAD, IDOT, SCALE); \
	FMOVS	F0, ret+32(FP); \
	RET

// DOTFUNCS is a type's two kernels, neon with IDOT_SMULL and sdot with IDOT_SDOT.
#define DOTFUNCS(neon, sdot, SETUP, LOAD, SCALE) \
	DOTFUNC(neon, SETUP, LOAD, IDOT_SMULL, SCALE); \
	DOTFUNC(sdot, SETUP, LOAD, IDOT_SDOT, SCALE)

DOTFUNCS(·dotQ8_0NEONAsm, ·dotQ8_0SDOTAsm, SETUP_Q8, LOADQ8, BLOCKSCALE)
DOTFUNCS(·dotQ4_0NEONAsm, ·dotQ4_0SDOTAsm, SETUP_Q4, LOADQ4, BLOCKSCALE)
DOTFUNCS(·dotIQ4NLNEONAsm, ·dotIQ4NLSDOTAsm, SETUP_IQ4, LOADIQ4, BLOCKSCALE)
DOTFUNCS(·dotMXFP4NEONAsm, ·dotMXFP4SDOTAsm, SETUP_IQ4, LOADMX, BLOCKSCALEMX)
DOTFUNCS(·dotQ5_0NEONAsm, ·dotQ5_0SDOTAsm, SETUP_Q5, LOADQ5, BLOCKSCALE)
DOTFUNCS(·dotQ4_1NEONAsm, ·dotQ4_1SDOTAsm, SETUP_Q41, LOADQ41, BLOCKSCALEMIN)
DOTFUNCS(·dotQ5_1NEONAsm, ·dotQ5_1SDOTAsm, SETUP_Q51, LOADQ51, BLOCKSCALEMIN)
