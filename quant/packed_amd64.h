// The frame shared by the Q8_0 and Q4_0 panel kernels (packed_amd64.s and packed_pair_amd64.s:
// AVX2; packed_vnni_amd64.s and packed_avxvnni_amd64.s: VNNI): arguments, the panel and block
// loops, one per column count, and the stores. Only VEX-encodable instructions, so that the
// AVX-VNNI kernels run without AVX-512.
//
// Registers: BX panels left; CX blocks left; SI the current block (scales, then quants); DI,
// R10, R12, R13 columns 0-3 (R8 apart); R11 nx; DX out (the panel's rows); R9 the block's
// activation sums (panelSums: the corrections at 4j(R9), the scales at 16+4j(R9)); Y0-Y1
// weights; Y2-Y3 scratch; Y5 the 0x80 (Q8_0) or 0x0f (Q4_0) bytes; Y7 the block's row scales;
// Y8-Y11 integer sums of columns 0-3; Y12-Y15 their results. The AVX2 kernels also hold int16
// ones in Y6.

#include "simd_amd64.h"

// The kernels' arguments: (np, nb int, w, x *byte, xStride, nx int, out *float32, outStride
// int, sums *int32), frame $0-72. The np panels follow
// each other in w; each starts over at x and sums and writes the 8 floats after the previous
// panel's.
#define VP_PROLOGUE(mask) MOVQ np+0(FP), BX; PANEL_ARGS; BCAST32(mask, X5, Y5)

// PANEL_ARGS loads the arguments every panel kernel takes the same way (the panel count and
// the sums are each kernel's own): SI w, R8 xStride, R11 nx, DX out.
#define PANEL_ARGS \
	MOVQ w+16(FP), SI;       \
	MOVQ xStride+32(FP), R8; \
	MOVQ nx+40(FP), R11;     \
	MOVQ out+48(FP), DX

// GROUP_ARGS starts the prologue of the kernels that run panels in groups of 2^shift (pairs,
// quads): BX the groups to run, R14 the bytes of one panel of nb blocks of bs bytes a row.
#define GROUP_ARGS(shift, bs) \
	MOVQ  np+0(FP), BX;  \
	SHRQ  $shift, BX;    \
	MOVQ  nb+8(FP), R14; \
	IMULQ $(8*bs), R14

// VP_COLS starts a panel (or pair of panels, packed_vnni512_amd64.s): all blocks to go, the
// columns and sums from their start. VP_PANEL also clears the results.
#define VP_COLS \
	MOVQ nb+8(FP), CX;    \
	MOVQ x+24(FP), DI;    \
	MOVQ sums+64(FP), R9; \
	COLUMNS

#define VP_PANEL VP_COLS; CLEAR4(VXORPS, Y12, Y13, Y14, Y15)

// VP_NEXT starts a block: loads the rows' scales and clears the integer sums. There is no
// software prefetch: a panel is one sequential stream (packed.go), which the hardware prefetcher
// follows; prefetches 4 KiB ahead made 1-token streaming 10-40% slower on Zen 4 (see
// BenchmarkMatMulPackedStream), and 1 KiB ahead ~15% slower (a throwaway A/B, median of 30).
#define VP_NEXT VCVTPH2PS (SI), Y7; CLEAR4(VPXOR, Y8, Y9, Y10, Y11)

#define VP_ADVANCE(bb) \
	ADDQ $bb, SI;  \
	ADDQ $32, R9;  \
	ADDQ $34, DI;  \
	ADDQ $34, R10; \
	ADDQ $34, R12; \
	ADDQ $34, R13; \
	DECQ CX

#define VP_NOFIX

// PANEL_STORE stores the nx (R11) columns' results from a0..a3 (ymm: 8 floats each; zmm: 16,
// for a pair of panels) at DX, outStride floats apart.
#define PANEL_STORE(a0, a1, a2, a3, done) PANEL_STORE_AT(0, a0, a1, a2, a3, done)

// PANEL_STORE_AT is PANEL_STORE at off bytes after DX: the rows after a panel's first results
// (32 for a pair of ymm panels, 64 for a quad of zmm ones).
#define PANEL_STORE_AT(off, a0, a1, a2, a3, done) \
	MOVQ    outStride+56(FP), R9; \
	VMOVUPS a0, off(DX);          \
	CMPQ    R11, $2;              \
	JLT     done;                 \
	VMOVUPS a1, off(DX)(R9*4);    \
	CMPQ    R11, $3;              \
	JLT     done;                 \
	VMOVUPS a2, off(DX)(R9*8);    \
	CMPQ    R11, $4;              \
	JLT     done;                 \
	LEAQ    (R9)(R9*2), R9;       \
	VMOVUPS a3, off(DX)(R9*4)

// PANEL_LOOPS is the body of every panel kernel (these, packed_k_amd64.h's and the 512-bit ones),
// after its prologue: for each of the BX panels (or pairs), START, then the loop for nx = 1..4
// (R11) columns, which runs Sn until Sn leaves CX at zero (each ends with DECQ CX), then END, the
// stores of the results a0..a3 and STEP, the move to the next panel's outputs (PANEL_STEP for
// one panel, ZP_STEP for a pair). lp, l1-l4, ldone and lnext are its labels.
#define PANEL_LOOPS(START, S1, S2, S3, S4, END, a0, a1, a2, a3, STEP, lp, l1, l2, l3, l4, ldone, lnext) \
lp:                                   \
	START;                            \
	CMPQ R11, $2;                     \
	JLT  l1;                          \
	JEQ  l2;                          \
	CMPQ R11, $3;                     \
	JEQ  l3;                          \
l4:                                   \
	S4;                               \
	JNZ  l4;                          \
	JMP  ldone;                       \
l3:                                   \
	S3;                               \
	JNZ  l3;                          \
	JMP  ldone;                       \
l2:                                   \
	S2;                               \
	JNZ  l2;                          \
	JMP  ldone;                       \
l1:                                   \
	S1;                               \
	JNZ  l1;                          \
ldone:                                \
	END;                              \
	PANEL_STORE(a0, a1, a2, a3, lnext); \
lnext:                                \
	STEP;                             \
	DECQ BX;                          \
	JNZ  lp;                          \
	VZEROUPPER;                       \
	RET

// PANEL_STEP moves to the next panel's 8 outputs; ZP_STEP, for a pair of panels in zmm, to the
// next pair's 16 and past panel p+1's weights (SI is at panel p+1 after the blocks of panel p;
// R14 is one panel's bytes).
#define PANEL_STEP ADDQ $32, DX
#define ZP_STEP ADDQ $64, DX; ADDQ R14, SI

// VP_BLOCK is one block for VP_KERNEL: NEXT, then B(DP), then the move to the next block.
#define VP_BLOCK(NEXT, B, DP, bb) NEXT; B(DP); VP_ADVANCE(bb)

// VP_KERNEL is a Q8_0/Q4_0 kernel's body after VP_PROLOGUE: PANEL_LOOPS over blocks that start
// with NEXT and run Bn(DP) (the chunks and the scaling for n columns, with the product macro
// DP), bb bytes each; then FIX (VP_DIV16, see packed_vnni_amd64.h, or VP_NOFIX). The results are
// in Y12-Y15.
#define VP_KERNEL(NEXT, B1, B2, B3, B4, DP, bb, FIX, lp, l1, l2, l3, l4, ldone, lnext) \
	PANEL_LOOPS(VP_PANEL, VP_BLOCK(NEXT, B1, DP, bb), VP_BLOCK(NEXT, B2, DP, bb), VP_BLOCK(NEXT, B3, DP, bb), VP_BLOCK(NEXT, B4, DP, bb), FIX, Y12, Y13, Y14, Y15, PANEL_STEP, lp, l1, l2, l3, l4, ldone, lnext)
