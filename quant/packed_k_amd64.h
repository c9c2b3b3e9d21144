// Macros and tables shared by the Q4_K and Q6_K panel kernels (packed_k_amd64.s, AVX2, and
// packed_k_vnni_amd64.s, AVX-512 VNNI): the frame, the scale/min unpacking, the min sums and the
// folding, which are the same instructions in both. The tables ·k4dup, ·k4m30 and ·q6dup are
// defined in packed_k_amd64.s.

#include "packed_amd64.h"

// Software prefetch distance in bytes ahead of the current super-block (see dot_k_amd64.s KPF):
// the panels are streamed once per token group, in order.
#define KPF 4096

// The kernels' arguments: (np, nb int, w, x *byte, xStride, nx int, out *float32, outStride
// int), frame -64. As the Q8_0/Q4_0 kernels (packed_amd64.h), they run np panels, which follow
// each other in w; each starts over at x and writes the 8 floats after the previous panel's.
// BX counts the panels down.
#define KP_PROLOGUE \
	MOVQ np+0(FP), BX;       \
	MOVQ w+16(FP), SI;       \
	MOVQ xStride+32(FP), R8; \
	MOVQ nx+40(FP), R11;     \
	MOVQ out+48(FP), DX

// KP_PANEL starts a panel: all super-blocks to go, the columns from their start.
#define KP_PANEL \
	MOVQ nb+8(FP), CX;    \
	MOVQ x+24(FP), DI;    \
	LEAQ (DI)(R8*1), R10; \
	LEAQ (DI)(R8*2), R12; \
	LEAQ (R10)(R8*2), R13

// KP_NEXT advances the weights by wbytes and the four columns by one Q8_K block and counts down.
#define KP_NEXT(wbytes) \
	ADDQ $wbytes, SI; \
	ADDQ $292, DI;    \
	ADDQ $292, R10;   \
	ADDQ $292, R12;   \
	ADDQ $292, R13;   \
	DECQ CX

// KP_START starts a panel with its results a0..a3 cleared.
#define KP_START(a0, a1, a2, a3) \
	KP_PANEL;          \
	VXORPS a0, a0, a0; \
	VXORPS a1, a1, a1; \
	VXORPS a2, a2, a2; \
	VXORPS a3, a3, a3

#define KP_NOFIX

// KP_KERNEL is a kernel's body after KP_PROLOGUE and its constants: PANEL_LOOPS (packed_amd64.h)
// over super-blocks run by Bn (which ends with KP_NEXT), the results in a0..a3.
#define KP_KERNEL(B1, B2, B3, B4, a0, a1, a2, a3, lp, l1, l2, l3, l4, ldone, lnext) \
	PANEL_LOOPS(KP_START(a0, a1, a2, a3), B1, B2, B3, B4, KP_NOFIX, a0, a1, a2, a3, lp, l1, l2, l3, l4, ldone, lnext)

// K4W decodes chunk c of sub-block s: Y12 = levels of elements 32s+4c.., Y13 of 32s+16+4c...
#define K4W(s, c) \
	VMOVDQU 128+128*s+32*c(SI), Y12; \
	VPSRLW  $4, Y12, Y13;            \
	VPAND   Y15, Y12, Y12;           \
	VPAND   Y15, Y13, Y13

// K4UNPACK decodes the scale/min vectors U_0..U_3 (see packed_k.go) of the super-block to the
// frame at 32q(SP) (Y12-Y14 scratch): byte 4r+v of U_q is [sc_2q, m_2q, sc_2q+1, m_2q+1][v] of
// row r, so VPSHUFB with k4dup picks the 8 rows' pairs (sc, sc) or (m, m) of one sub-block.
#define K4UNPACK \
	VMOVDQU 96(SI), Y14;            \
	VPAND   32(SI), Y15, Y12;       \
	VPSLLW  $4, Y14, Y13;           \
	VPAND   ·k4m30(SB), Y13, Y13;  \
	VPOR    Y13, Y12, Y12;          \
	VMOVDQU Y12, 0(SP);             \
	VMOVDQU 32(SI), Y12;            \
	VPSRLW  $4, Y12, Y12;           \
	VPAND   Y15, Y12, Y12;          \
	VPSLLW  $2, Y14, Y13;           \
	VPAND   ·k4m30(SB), Y13, Y13;  \
	VPOR    Y13, Y12, Y12;          \
	VMOVDQU Y12, 32(SP);            \
	VPAND   64(SI), Y15, Y12;       \
	VPAND   ·k4m30(SB), Y14, Y13;  \
	VPOR    Y13, Y12, Y12;          \
	VMOVDQU Y12, 64(SP);            \
	VMOVDQU 64(SI), Y12;            \
	VPSRLW  $4, Y12, Y12;           \
	VPAND   Y15, Y12, Y12;          \
	VPSRLW  $2, Y14, Y13;           \
	VPAND   ·k4m30(SB), Y13, Y13;  \
	VPOR    Y13, Y12, Y12;          \
	VMOVDQU Y12, 96(SP)

// Min sums: macc = Σ_s (m_s, m_s)·(bsum_2s, bsum_2s+1) per lane, with the pairs in Y13.
#define K4MF(s, P, macc) \
	VPBROADCASTD 260+4*s(P), Y14; \
	VPMADDWD     Y13, Y14, macc

#define K4MA(s, P, macc) \
	VPBROADCASTD 260+4*s(P), Y14; \
	VPMADDWD     Y13, Y14, Y14;   \
	VPADDD       Y14, macc, macc

#define K4MF1(s) K4MF(s, DI, Y0)
#define K4MF2(s) K4MF1(s); K4MF(s, R10, Y1)
#define K4MF3(s) K4MF2(s); K4MF(s, R12, Y2)
#define K4MF4(s) K4MF3(s); K4MF(s, R13, Y3)
#define K4M1(s) K4MA(s, DI, Y0)
#define K4M2(s) K4M1(s); K4MA(s, R10, Y1)
#define K4M3(s) K4M2(s); K4MA(s, R12, Y2)
#define K4M4(s) K4M3(s); K4MA(s, R13, Y3)

#define K4MINS(MF, M) \
	VMOVDQU 0(SP), Y12;                 \
	VPSHUFB ·k4dup+32(SB), Y12, Y13;    \
	MF(0);                               \
	VPSHUFB ·k4dup+96(SB), Y12, Y13;    \
	M(1);                                \
	VMOVDQU 32(SP), Y12;                 \
	VPSHUFB ·k4dup+32(SB), Y12, Y13;    \
	M(2);                                \
	VPSHUFB ·k4dup+96(SB), Y12, Y13;    \
	M(3);                                \
	VMOVDQU 64(SP), Y12;                 \
	VPSHUFB ·k4dup+32(SB), Y12, Y13;    \
	M(4);                                \
	VPSHUFB ·k4dup+96(SB), Y12, Y13;    \
	M(5);                                \
	VMOVDQU 96(SP), Y12;                 \
	VPSHUFB ·k4dup+32(SB), Y12, Y13;    \
	M(6);                                \
	VPSHUFB ·k4dup+96(SB), Y12, Y13;    \
	M(7)

// K4FOLD folds column P's super-block sums into facc: facc += dx·(d·iacc − dmin·macc), with the
// 8 rows' d in Y12 and dmin in Y13.
#define K4FOLD(P, macc, iacc, facc) \
	VCVTDQ2PS    iacc, iacc;       \
	VCVTDQ2PS    macc, macc;       \
	VMULPS       Y12, iacc, iacc;  \
	VFNMADD231PS Y13, macc, iacc;  \
	VBROADCASTSS (P), Y14;         \
	VFMADD231PS  Y14, iacc, facc

#define K4FOLD1 K4FOLD(DI, Y0, Y4, Y8)
#define K4FOLD2 K4FOLD1; K4FOLD(R10, Y1, Y5, Y9)
#define K4FOLD3 K4FOLD2; K4FOLD(R12, Y2, Y6, Y10)
#define K4FOLD4 K4FOLD3; K4FOLD(R13, Y3, Y7, Y11)

// Q6DA decodes the levels of elements 16u+0..3 (Y10) and 16u+4..7 (Y11) of unit u; Q6DB those of
// 16u+8..11 (Y10) and 16u+12..15 (Y11), the latter from bits 6-7 of the three chunks.
#define Q6DA(u) \
	VPAND 144+96*u(SI), Y15, Y10; \
	VPAND 176+96*u(SI), Y15, Y11

#define Q6DB(u) \
	VPAND  208+96*u(SI), Y15, Y10; \
	VPANDN 144+96*u(SI), Y15, Y11; \
	VPSRLW $2, Y11, Y11;           \
	VPANDN 176+96*u(SI), Y15, Y12; \
	VPOR   Y12, Y11, Y11;          \
	VPSRLW $2, Y11, Y11;           \
	VPANDN 208+96*u(SI), Y15, Y12; \
	VPOR   Y12, Y11, Y11;          \
	VPSRLW $2, Y11, Y11
