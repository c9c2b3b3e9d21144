#include "textflag.h"
#include "dot_arm64.h"

// NEON integer part of the Q2_K and Q3_K dots (see dot_k23_arm64.go): the sixteen 16-element
// group dots of one super-block's levels with one Q8_K activation super-block. The int8 dots and
// the reduction are the macros of dot_arm64.h.
//
// Levels: for each half h of the block, 32 bytes of qs (V8:V9) hold four 2-bit fields per byte;
// field j of byte i is element 128h + 32j + i, so one field of V8 (V9) is group 8h+2j (8h+2j+1).
// Q3_K subtracts 4 unless bit 4h+j of hmask[i] (V12:V13) is set.
//
// Registers: R0 qs, R3 hmask, R1 activation quants, R2 out; V30 = 3, V29 = 4 (also 4 in V31)
// in every byte; V0:V1 the levels of two groups, V2 a group's activations, V16 its partial sums,
// V20-V23 four groups' partial sums.

// SHj puts field j of V8:V9 (not yet masked) in V0:V1.
#define SH0 \
	VMOV	V8.B16, V0.B16; \
	VMOV	V9.B16, V1.B16
#define SH1 \
	VUSHR	$2, V8.B16, V0.B16; \
	VUSHR	$2, V9.B16, V1.B16
#define SH2 \
	VUSHR	$4, V8.B16, V0.B16; \
	VUSHR	$4, V9.B16, V1.B16
#define SH3 \
	VUSHR	$6, V8.B16, V0.B16; \
	VUSHR	$6, V9.B16, V1.B16

// ADJ2 leaves the Q2_K levels as they are (a no-op keeps one CRUMB macro for both types).
#define ADJ2(mask) \
	VORR	V0.B16, V0.B16, V0.B16

// ADJ3 subtracts 4 from the levels V0:V1 whose hmask bit (mask, an immediate) is clear.
#define ADJ3(mask) \
	VMOVI	mask, V28.B16; \
	BITS(V28, V12, V13); \
	VADD	V10.B16, V0.B16, V0.B16; \
	VADD	V11.B16, V1.B16, V1.B16; \
	VSUB	V31.B16, V0.B16, V0.B16; \
	VSUB	V31.B16, V1.B16, V1.B16

// CRUMB dots field SH of the current half (two groups) into d0 and d1.
#define CRUMB(IDOT, SH, ADJ, mask, d0, d1) \
	SH; \
	VAND	V30.B16, V0.B16, V0.B16; \
	VAND	V30.B16, V1.B16, V1.B16; \
	ADJ(mask); \
	VMOV	V1.B16, V3.B16; \
	VLD1.P	16(R1), [V2.B16]; \
	IDOT; \
	VMOV	V16.B16, d0.B16; \
	VMOV	V3.B16, V0.B16; \
	VLD1.P	16(R1), [V2.B16]; \
	IDOT; \
	VMOV	V16.B16, d1.B16

// HALF does the eight groups of half h (masks m0-m3: the hmask bits 4h..4h+3).
#define HALF(IDOT, ADJ, m0, m1, m2, m3) \
	VLD1.P	32(R0), [V8.B16, V9.B16]; \
	CRUMB(IDOT, SH0, ADJ, m0, V20, V21); \
	CRUMB(IDOT, SH1, ADJ, m1, V22, V23); \
	RED4; \
	CRUMB(IDOT, SH2, ADJ, m2, V20, V21); \
	CRUMB(IDOT, SH3, ADJ, m3, V22, V23); \
	RED4

#define BODY(IDOT, ADJ) \
	MOVD	qs+0(FP), R0; \
	MOVD	hm+8(FP), R3; \
	MOVD	xq+16(FP), R1; \
	MOVD	out+24(FP), R2; \
	VLD1	(R3), [V12.B16, V13.B16]; \
	VMOVI	$3, V30.B16; \
	VMOVI	$4, V29.B16; \
	VMOVI	$4, V31.B16; \
	HALF(IDOT, ADJ, $1, $2, $4, $8); \
	HALF(IDOT, ADJ, $16, $32, $64, $128)

// Q2BODY and Q3BODY are the kernels with the int8 dot IDOT.
#define Q2BODY(IDOT) BODY(IDOT, ADJ2)
#define Q3BODY(IDOT) BODY(IDOT, ADJ3)

// func q2KDotsNEON(qs, hm, xq *byte, out *[16]int32)
// func q2KDotsSDOT(qs, hm, xq *byte, out *[16]int32)
KERNELS16(·q2KDotsNEON, ·q2KDotsSDOT, $0-32, Q2BODY)

// func q3KDotsNEON(qs, hm, xq *byte, out *[16]int32)
// func q3KDotsSDOT(qs, hm, xq *byte, out *[16]int32)
KERNELS16(·q3KDotsNEON, ·q3KDotsSDOT, $0-32, Q3BODY)
