#include "textflag.h"

// Q4_0 x Q8_0 and Q8_0 x Q8_0 dot products with AVX2, FMA and F16C (see dot_q8_amd64.go).
//
// func dotQ4_0AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)
// func dotQ8_0AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)
//
// nb >= 1 blocks; 1 <= nx <= 4. Registers:
//	SI weight block, DI column 0's activation block (column j is at DI + j*R8), R9 = 3*R8,
//	CX blocks left, DX out
//	Y0 signed weight bytes, Y1 their absolute values, Y2-Y5 per-column products,
//	Y6 block scales [s0 s1 s2 s3 | s0 s1 s2 s3] with s_j = d_w*d_xj, Y7 scratch,
//	Y8-Y11 accumulators, Y13 int16 ones, Y14 int8 eights, Y15 0x0f bytes.

// Q4W expands the Q4_0 block at SI: Y0 = nibbles-8 (low nibbles are elements 0-15, high
// nibbles 16-31), Y1 = |Y0|.
#define Q4W \
	VMOVDQU     2(SI), X0;     \
	VPSRLW      $4, X0, X1;    \
	VINSERTI128 $1, X1, Y0, Y0; \
	VPAND       Y15, Y0, Y0;   \
	VPSUBB      Y14, Y0, Y0;   \
	VPSIGNB     Y0, Y0, Y1

// Q8W loads the Q8_0 block at SI: Y0 = quants, Y1 = |Y0| (-128 becomes unsigned 128).
#define Q8W \
	VMOVDQU 2(SI), Y0; \
	VPSIGNB Y0, Y0, Y1

// PROD16 leaves in t the 16 int16 pair sums of the weights times the 32 quants at addr.
#define PROD16(addr, t) \
	VMOVDQU    addr, t;   \
	VPSIGNB    Y0, t, t;  \
	VPMADDUBSW t, Y1, t

// PROD32 leaves in t the 8 int32 partial sums of the weights times the 32 quants at addr.
#define PROD32(addr, t) \
	PROD16(addr, t); \
	VPMADDWD Y13, t, t

// COL accumulates one column: acc += float(Σ of the 8 int32 partial sums) * s_imm.
#define COL(addr, t, acc, imm) \
	PROD32(addr, t);       \
	VCVTDQ2PS   t, t;      \
	VPERMILPS   imm, Y6, Y7; \
	VFMADD231PS Y7, t, acc

// SCALES converts the f16 scales gathered in AX (column j's in bits 16j..16j+15) and the weight
// scale at SI into Y6 = [s0 s1 s2 s3 | s0 s1 s2 s3].
#define SCALES \
	VMOVQ        AX, X6;     \
	VPBROADCASTQ X6, X6;     \
	VCVTPH2PS    X6, Y6;     \
	VPBROADCASTW (SI), X7;   \
	VCVTPH2PS    X7, Y7;     \
	VMULPS       Y7, Y6, Y6

#define GATHER1 \
	MOVWLZX (DI), AX

#define GATHER2 \
	GATHER1;                  \
	MOVWLZX (DI)(R8*1), BX;   \
	SHLL    $16, BX;          \
	ORL     BX, AX

#define GATHER3 \
	GATHER2;                  \
	MOVWLZX (DI)(R8*2), BX;   \
	SHLQ    $32, BX;          \
	ORQ     BX, AX

#define GATHER4 \
	GATHER3;                  \
	MOVWLZX (DI)(R9*1), BX;   \
	SHLQ    $48, BX;          \
	ORQ     BX, AX

// HSUM stores the sum of the 8 floats of acc (whose low half is accx) at dst.
#define HSUM(acc, accx, dst) \
	VEXTRACTF128 $1, acc, X7;   \
	VADDPS       X7, accx, X7;  \
	VMOVHLPS     X7, X7, X12;   \
	VADDPS       X12, X7, X7;   \
	VMOVSHDUP    X7, X12;       \
	VADDSS       X12, X7, X7;   \
	VMOVSS       X7, dst

#define PROLOGUE \
	MOVQ         nb+0(FP), CX;      \
	MOVQ         w+8(FP), SI;       \
	MOVQ         x+16(FP), DI;      \
	MOVQ         xStride+24(FP), R8; \
	MOVQ         nx+32(FP), R11;    \
	MOVQ         out+40(FP), DX;    \
	LEAQ         (R8)(R8*2), R9;    \
	MOVL         $0x0f0f0f0f, AX;   \
	VMOVD        AX, X15;           \
	VPBROADCASTD X15, Y15;          \
	MOVL         $0x08080808, AX;   \
	VMOVD        AX, X14;           \
	VPBROADCASTD X14, Y14;          \
	MOVL         $0x00010001, AX;   \
	VMOVD        AX, X13;           \
	VPBROADCASTD X13, Y13;          \
	VPXOR        Y8, Y8, Y8;        \
	VPXOR        Y9, Y9, Y9;        \
	VPXOR        Y10, Y10, Y10;     \
	VPXOR        Y11, Y11, Y11

// NEXT advances to the next block (WB weight bytes per block) and loops to label.
#define NEXT(WB, label) \
	ADDQ $WB, SI; \
	ADDQ $34, DI; \
	DECQ CX;      \
	JNZ  label

// FINISH4 stores the four column sums of the lane-per-column accumulator Y8.
#define FINISH4 \
	VEXTRACTF128 $1, Y8, X7; \
	VADDPS       X7, X8, X8; \
	VMOVUPS      X8, (DX);   \
	VZEROUPPER;              \
	RET

TEXT ·dotQ4_0AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	CMPQ R11, $4
	JEQ  q4x4
	CMPQ R11, $3
	JEQ  q4x3
	CMPQ R11, $2
	JEQ  q4x2

q4x1:
	Q4W
	GATHER1
	SCALES
	COL(2(DI), Y2, Y8, $0x00)
	NEXT(18, q4x1)
	HSUM(Y8, X8, (DX))
	VZEROUPPER
	RET

q4x2:
	Q4W
	GATHER2
	SCALES
	COL(2(DI), Y2, Y8, $0x00)
	COL(2(DI)(R8*1), Y3, Y9, $0x55)
	NEXT(18, q4x2)
	HSUM(Y8, X8, (DX))
	HSUM(Y9, X9, 4(DX))
	VZEROUPPER
	RET

q4x3:
	Q4W
	GATHER3
	SCALES
	COL(2(DI), Y2, Y8, $0x00)
	COL(2(DI)(R8*1), Y3, Y9, $0x55)
	COL(2(DI)(R8*2), Y4, Y10, $0xaa)
	NEXT(18, q4x3)
	HSUM(Y8, X8, (DX))
	HSUM(Y9, X9, 4(DX))
	HSUM(Y10, X10, 8(DX))
	VZEROUPPER
	RET

q4x4:
	// The per-column int16 sums are reduced to one vector, lane j = column j (per 128-bit
	// half); Q4_0 products are at most 8*128 in magnitude, so 16-bit sums of 8 cannot overflow.
	Q4W
	PROD16(2(DI), Y2)
	PROD16(2(DI)(R8*1), Y3)
	PROD16(2(DI)(R8*2), Y4)
	PROD16(2(DI)(R9*1), Y5)
	VPHADDW     Y3, Y2, Y2
	VPHADDW     Y5, Y4, Y4
	VPHADDW     Y4, Y2, Y2
	VPMADDWD    Y13, Y2, Y2
	VCVTDQ2PS   Y2, Y2
	GATHER4
	SCALES
	VFMADD231PS Y6, Y2, Y8
	NEXT(18, q4x4)
	FINISH4

TEXT ·dotQ8_0AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	CMPQ R11, $4
	JEQ  q8x4
	CMPQ R11, $3
	JEQ  q8x3
	CMPQ R11, $2
	JEQ  q8x2

q8x1:
	Q8W
	GATHER1
	SCALES
	COL(2(DI), Y2, Y8, $0x00)
	NEXT(34, q8x1)
	HSUM(Y8, X8, (DX))
	VZEROUPPER
	RET

q8x2:
	Q8W
	GATHER2
	SCALES
	COL(2(DI), Y2, Y8, $0x00)
	COL(2(DI)(R8*1), Y3, Y9, $0x55)
	NEXT(34, q8x2)
	HSUM(Y8, X8, (DX))
	HSUM(Y9, X9, 4(DX))
	VZEROUPPER
	RET

q8x3:
	Q8W
	GATHER3
	SCALES
	COL(2(DI), Y2, Y8, $0x00)
	COL(2(DI)(R8*1), Y3, Y9, $0x55)
	COL(2(DI)(R8*2), Y4, Y10, $0xaa)
	NEXT(34, q8x3)
	HSUM(Y8, X8, (DX))
	HSUM(Y9, X9, 4(DX))
	HSUM(Y10, X10, 8(DX))
	VZEROUPPER
	RET

q8x4:
	// Q8_0 pair sums need 32 bits, so the reduction to one vector happens after vpmaddwd.
	Q8W
	PROD32(2(DI), Y2)
	PROD32(2(DI)(R8*1), Y3)
	PROD32(2(DI)(R8*2), Y4)
	PROD32(2(DI)(R9*1), Y5)
	VPHADDD     Y3, Y2, Y2
	VPHADDD     Y5, Y4, Y4
	VPHADDD     Y4, Y2, Y2
	VCVTDQ2PS   Y2, Y2
	GATHER4
	SCALES
	VFMADD231PS Y6, Y2, Y8
	NEXT(34, q8x4)
	FINISH4
