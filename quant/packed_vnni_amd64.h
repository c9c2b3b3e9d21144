// Macros shared by the VNNI panel kernels (packed_vnni_amd64.s, packed_avxvnni_amd64.s): the
// AVX2 kernels' frame (packed_amd64.s) with activation sums. Only VEX-encodable instructions, so
// that the AVX-VNNI kernels run without AVX-512.
//
// Registers: CX blocks left; SI the current block (scales, then quants); DI, R10, R12, R13
// columns 0-3 (R8 apart); R11 nx; DX out; R9 sums; Y0-Y1 weights; Y2-Y3 scratch; Y5 the 0x80
// (Q8_0) or 0x0f (Q4_0) bytes; Y7 the block's row scales; Y8-Y11 integer sums of columns 0-3;
// Y12-Y15 their results.

#define VP_PROLOGUE(mask) \
	MOVQ         nb+0(FP), CX;       \
	MOVQ         w+8(FP), SI;        \
	MOVQ         x+16(FP), DI;       \
	MOVQ         xStride+24(FP), R8; \
	MOVQ         nx+32(FP), R11;     \
	MOVQ         out+40(FP), DX;     \
	MOVQ         sums+56(FP), R9;    \
	LEAQ         (DI)(R8*1), R10;    \
	LEAQ         (DI)(R8*2), R12;    \
	LEAQ         (R10)(R8*2), R13;   \
	VXORPS       Y12, Y12, Y12;      \
	VXORPS       Y13, Y13, Y13;      \
	VXORPS       Y14, Y14, Y14;      \
	VXORPS       Y15, Y15, Y15;      \
	MOVL         $mask, AX;          \
	VMOVD        AX, X5;             \
	VPBROADCASTD X5, Y5

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

// V4W(c) decodes Q4_0 chunk c: Y0 = low nibbles (elements 4c..), Y1 = high nibbles (16+4c..).
#define V4W(c) \
	VMOVDQU 16+32*c(SI), Y0; \
	VPSRLW  $4, Y0, Y1;   \
	VPAND   Y5, Y0, Y0;   \
	VPAND   Y5, Y1, Y1

// VP_STORE stores the nx (R11) columns' results from Y12-Y15 at DX, outStride floats apart.
#define VP_STORE(done) \
	MOVQ    outStride+48(FP), R9; \
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

// VP_KERNEL is a kernel's body after VP_PROLOGUE: one block loop per column count nx = 1..4
// (R11), each starting blocks with NEXT and running them with Bn(DP) (the chunks and the scaling
// for n columns, with the product macro DP), bb bytes per block; then the stores. l1-l4,
// ldone and lret are its labels.
#define VP_KERNEL(NEXT, B1, B2, B3, B4, DP, bb, l1, l2, l3, l4, ldone, lret) \
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
	VP_STORE(lret);  \
lret:                \
	VZEROUPPER;      \
	RET
