#include "textflag.h"

// NEON kernels for one F32 activation row against one F32, F16 or BF16 weight row (see
// dot_f_arm64.go): n > 0 elements, a multiple of 8, eight per loop pass into two accumulators of
// four lanes (V16, V17). F16 weights are widened with FCVTL/FCVTL2 (WORD encodings, GNU syntax
// as `llvm-mc -triple=aarch64 -show-encoding` prints it), BF16 weights by interleaving zero
// halves below them (VZIP1/VZIP2 with the zero register V31: bf16 bits << 16).
//
// Registers: R0 elements left, R1 weights, R2 activations; V0:V1 eight activations, V4:V5
// eight weights as float32, V8 eight halves.

// FINISH sets F0 to (V16 + V17) summed pairwise over the lanes.
#define FINISH \
	WORD	$0x4e31d610 /* fadd  v16.4s, v16.4s, v17.4s */; \
	WORD	$0x6e30d610 /* faddp v16.4s, v16.4s, v16.4s */; \
	WORD	$0x7e30da00 /* faddp s0, v16.2s */

#define ZERO \
	VEOR	V16.B16, V16.B16, V16.B16; \
	VEOR	V17.B16, V17.B16, V17.B16

// ROWDOT is one kernel, func name(n int, w, x *byte) float32: INIT once, then per pass LOADW
// (the next weights, R1), the next eight activations and WIDEN (the weights to float32 in V4:V5).
#define ROWDOT(name, INIT, LOADW, WIDEN) \
TEXT name(SB), NOSPLIT, $0-28; \
	MOVD	n+0(FP), R0; \
	MOVD	w+8(FP), R1; \
	MOVD	x+16(FP), R2; \
	ZERO; \
	INIT; \
loop: \
	LOADW; \
	VLD1.P	32(R2), [V0.S4, V1.S4]; \
	WIDEN; \
	VFMLA	V4.S4, V0.S4, V16.S4; \
	VFMLA	V5.S4, V1.S4, V17.S4; \
	SUBS	$8, R0; \
	BGT	loop; \
	FINISH; \
	FMOVS	F0, ret+24(FP); \
	RET

// The steps: NONE is none; LOADF32 loads eight float32 weights, LOADH eight halves into V8;
// WIDENF16 widens F16 halves, WIDENBF16 BF16 ones with the zero halves that ZEROV31 sets.
#define NONE
#define LOADF32 VLD1.P 32(R1), [V4.S4, V5.S4]
#define LOADH VLD1.P 16(R1), [V8.H8]
#define ZEROV31 VEOR V31.B16, V31.B16, V31.B16

#define WIDENF16 \
	WORD	$0x0e217904 /* fcvtl  v4.4s, v8.4h */; \
	WORD	$0x4e217905 /* fcvtl2 v5.4s, v8.8h */

#define WIDENBF16 \
	VZIP1	V8.H8, V31.H8, V4.H8; \
	VZIP2	V8.H8, V31.H8, V5.H8

ROWDOT(·dotF32RowNEON, NONE, LOADF32, NONE)
ROWDOT(·dotF16RowNEON, NONE, LOADH, WIDENF16)
ROWDOT(·dotBF16RowNEON, ZEROV31, LOADH, WIDENBF16)
