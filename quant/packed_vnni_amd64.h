// Macros shared by the VNNI panel kernels (packed_vnni_amd64.s, packed_avxvnni_amd64.s) beyond
// the frame of packed_amd64.h: the weight decoders and the final scaling of Q4_0. Only
// VEX-encodable instructions, so that the AVX-VNNI kernels run without AVX-512.

#include "packed_amd64.h"

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
	MOVL         $0x3d800000, AX; \
	VMOVD        AX, X0;          \
	VPBROADCASTD X0, Y0;          \
	VMULPS       Y0, Y12, Y12;    \
	VMULPS       Y0, Y13, Y13;    \
	VMULPS       Y0, Y14, Y14;    \
	VMULPS       Y0, Y15, Y15
