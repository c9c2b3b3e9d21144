// Macros shared by the VNNI panel kernels (packed_vnni_amd64.s, packed_avxvnni_amd64.s,
// packed_vnni512_amd64.s) beyond the frame of packed_amd64.h: the starting values, the weight
// decoders, the joining of a column's two sums and the final scaling of Q4_0. Only
// VEX-encodable instructions, so that the AVX-VNNI kernels run without AVX-512.

#include "packed_amd64.h"

// VI1-VI4 start the first n columns' sums a0-a3 at the corrections (the int32s at 4j(R9)).
#define VI1(a0, a1, a2, a3) VPBROADCASTD 0(R9), a0
#define VI2(a0, a1, a2, a3) VI1(a0, a1, a2, a3); VPBROADCASTD 4(R9), a1
#define VI3(a0, a1, a2, a3) VI2(a0, a1, a2, a3); VPBROADCASTD 8(R9), a2
#define VI4(a0, a1, a2, a3) VI3(a0, a1, a2, a3); VPBROADCASTD 12(R9), a3

// V8W(c) loads Q8_0 chunk c as unsigned w+128.
#define V8W(c) VPXOR 16+32*c(SI), Y5, Y0

// V4W(c) decodes Q4_0 chunk c: Y0 = low nibbles q (elements 4c..), Y1 = the high nibbles in
// place, 16·q (elements 16+4c..). Not shifting them down saves an instruction per chunk; the
// high sums come out 16 times too large, so the kernels scale the low ones up by 16 instead
// (VSCALE4, ASCALE4) and the results down by 16 at the end (VP_DIV16). Both are exact: the
// integers stay far below 2^24, and scaling by a power of two commutes with float rounding.
#define V4W(c) \
	VMOVDQU 16+32*c(SI), Y1; \
	VPAND   Y5, Y1, Y0;      \
	VPANDN  Y1, Y5, Y1

// VP_DIV16 divides the four results by 16 (Y0 is free after the block loop).
#define VP_DIV16 \
	BCAST32(0x3d800000, X0, Y0);  \
	VMULPS       Y0, Y12, Y12;    \
	VMULPS       Y0, Y13, Y13;    \
	VMULPS       Y0, Y14, Y14;    \
	VMULPS       Y0, Y15, Y15

// SUM8 (Q8_0) adds a column's two block sums acc and acc2; SUM4 (Q4_0) adds the high-nibble sum
// acc2, 16 times the products, to 16 times the low one (see V4W). Then FL(F, acc, facc) converts
// and accumulates the sum (VFLOAT, AFLOAT or ZFLOAT).
#define SUM8(FL, F, acc, acc2, facc) \
	VPADDD acc2, acc, acc; \
	FL(F, acc, facc)

#define SUM4(FL, F, acc, acc2, facc) \
	VPSLLD $4, acc, acc;   \
	VPADDD acc2, acc, acc; \
	FL(F, acc, facc)
