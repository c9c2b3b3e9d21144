// Macros shared by the VNNI panel kernels (packed_vnni_amd64.s, packed_avxvnni_amd64.s): the
// AVX2 kernels' frame (packed_amd64.s) with activation sums. Only VEX-encodable instructions, so
// that the AVX-VNNI kernels run without AVX-512.
//
// Registers: BX panels left; CX blocks left; SI the current block (scales, then quants); DI,
// R10, R12, R13 columns 0-3 (R8 apart); R11 nx; DX out (the panel's rows); R9 sums; Y0-Y1
// weights; Y2-Y3 scratch; Y5 the 0x80 (Q8_0) or 0x0f (Q4_0) bytes; Y7 the block's row scales;
// Y8-Y11 integer sums of columns 0-3; Y12-Y15 their results.

// The kernels' arguments: (np, nb int, w, x *byte, xStride, nx int, out *float32, outStride
// int, sums *int32), frame $0-72. The panels follow each other in w; each starts over at x and
// sums and writes the 8 floats after the previous panel's.
#define VP_PROLOGUE(mask) \
	MOVQ         np+0(FP), BX;       \
	MOVQ         w+16(FP), SI;       \
	MOVQ         xStride+32(FP), R8; \
	MOVQ         nx+40(FP), R11;     \
	MOVQ         out+48(FP), DX;     \
	MOVL         $mask, AX;          \
	VMOVD        AX, X5;             \
	VPBROADCASTD X5, Y5

// VP_PANEL starts a panel: all blocks to go, the columns and sums from their start, cleared
// results.
#define VP_PANEL \
	MOVQ   nb+8(FP), CX;       \
	MOVQ   x+24(FP), DI;       \
	MOVQ   sums+64(FP), R9;    \
	LEAQ   (DI)(R8*1), R10;    \
	LEAQ   (DI)(R8*2), R12;    \
	LEAQ   (R10)(R8*2), R13;   \
	VXORPS Y12, Y12, Y12;      \
	VXORPS Y13, Y13, Y13;      \
	VXORPS Y14, Y14, Y14;      \
	VXORPS Y15, Y15, Y15

// VP_NEXT starts a block as PANEL_NEXT does: the rows' scales, cleared sums, no prefetch.
#define VP_NEXT \
	VCVTPH2PS  (SI), Y7;      \
	VPXOR      Y8, Y8, Y8;    \
	VPXOR      Y9, Y9, Y9;    \
	VPXOR      Y10, Y10, Y10; \
	VPXOR      Y11, Y11, Y11

#define VP_ADVANCE(bb) \
	ADDQ $bb, SI;  \
	ADDQ $16, R9;  \
	ADDQ $34, DI;  \
	ADDQ $34, R10; \
	ADDQ $34, R12; \
	ADDQ $34, R13; \
	DECQ CX

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

#define VP_NOFIX

// VP_STORE stores the nx (R11) columns' results from Y12-Y15 at DX, outStride floats apart.
#define VP_STORE(done) \
	MOVQ    outStride+56(FP), R9; \
	VMOVUPS Y12, (DX);            \
	CMPQ    R11, $2;              \
	JLT     done;                 \
	VMOVUPS Y13, (DX)(R9*4);      \
	CMPQ    R11, $3;              \
	JLT     done;                 \
	VMOVUPS Y14, (DX)(R9*8);      \
	CMPQ    R11, $4;              \
	JLT     done;                 \
	LEAQ    (R9)(R9*2), R9;       \
	VMOVUPS Y15, (DX)(R9*4)

// VP_KERNEL is a kernel's body after VP_PROLOGUE: for each panel, one block loop per column
// count nx = 1..4 (R11), each starting blocks with NEXT and running them with Bn(DP) (the
// chunks and the scaling for n columns, with the product macro DP), bb bytes per block; then FIX
// (VP_DIV16 or VP_NOFIX) and the stores. lp, l1-l4, ldone and lnext are its labels.
#define VP_KERNEL(NEXT, B1, B2, B3, B4, DP, bb, FIX, lp, l1, l2, l3, l4, ldone, lnext) \
lp:                  \
	VP_PANEL;        \
	CMPQ R11, $2;    \
	JLT  l1;         \
	JEQ  l2;         \
	CMPQ R11, $3;    \
	JEQ  l3;         \
l4:                  \
	NEXT;            \
	B4(DP);          \
	VP_ADVANCE(bb);  \
	JNZ  l4;         \
	JMP  ldone;      \
l3:                  \
	NEXT;            \
	B3(DP);          \
	VP_ADVANCE(bb);  \
	JNZ  l3;         \
	JMP  ldone;      \
l2:                  \
	NEXT;            \
	B2(DP);          \
	VP_ADVANCE(bb);  \
	JNZ  l2;         \
	JMP  ldone;      \
l1:                  \
	NEXT;            \
	B1(DP);          \
	VP_ADVANCE(bb);  \
	JNZ  l1;         \
ldone:               \
	FIX;             \
	VP_STORE(lnext); \
lnext:               \
	ADDQ $32, DX;    \
	DECQ BX;         \
	JNZ  lp;         \
	VZEROUPPER;      \
	RET
