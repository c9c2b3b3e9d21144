#include "textflag.h"

// Kernels for packed Q4_0 and Q8_0 weights (see packed.go for the panel layout): 8 rows times nx
// (1..4) columns of Q8_0 activations. A block's chunk holds the same 4 elements of the 8 rows, one
// row per dword lane, so each column's products accumulate vertically: per block and column the
// integer sums of the 8 rows sit in one register, converted once and fused-multiply-added with
// the 8 rows' scales times the column's scale. Each chunk is decoded once for all nx columns.
//
// Registers: CX blocks left; SI the current block (its 8 row scales, then its quants); DI, R10,
// R12, R13 columns 0-3 (R8 apart); R11 nx; DX out; R9 Q4_0 sums; Y0-Y1 decoded weights; Y2-Y3
// scratch; Y5 0x0f bytes; Y6 int16 ones; Y7 the block's row scales; Y8-Y11 integer sums of
// columns 0-3; Y12-Y15 their results.
//
// Exactness: as the single-row kernels, exact integer sums for activation quants in [-127, 127].
// Q4_0 sums of 8 chunks stay in 16 bits: |q·x + q'·x'| <= 2·15·128 per lane and chunk.

// PANEL_PROLOGUE loads the arguments.
#define PANEL_PROLOGUE \
	MOVQ         nb+0(FP), CX;       \
	MOVQ         w+8(FP), SI;        \
	MOVQ         x+16(FP), DI;       \
	MOVQ         xStride+24(FP), R8; \
	MOVQ         nx+32(FP), R11;     \
	MOVQ         out+40(FP), DX;     \
	LEAQ         (DI)(R8*1), R10;    \
	LEAQ         (DI)(R8*2), R12;    \
	LEAQ         (R10)(R8*2), R13;   \
	VXORPS       Y12, Y12, Y12;      \
	VXORPS       Y13, Y13, Y13;      \
	VXORPS       Y14, Y14, Y14;      \
	VXORPS       Y15, Y15, Y15;      \
	MOVL         $0x00010001, AX;    \
	VMOVD        AX, X6;             \
	VPBROADCASTD X6, Y6;             \
	MOVL         $0x0f0f0f0f, AX;    \
	VMOVD        AX, X5;             \
	VPBROADCASTD X5, Y5

// PANEL_NEXT starts a block: loads the rows' scales and clears the integer sums. There is no
// software prefetch: a panel is one sequential stream (packed.go), which the hardware prefetcher
// follows; prefetches 4 KiB ahead made 1-token streaming 10-40% slower on Zen 4 (see
// BenchmarkMatMulPackedStream).
#define PANEL_NEXT \
	VCVTPH2PS  (SI), Y7;      \
	VPXOR      Y8, Y8, Y8;    \
	VPXOR      Y9, Y9, Y9;    \
	VPXOR      Y10, Y10, Y10; \
	VPXOR      Y11, Y11, Y11

// PANEL_ADVANCE moves to the next block of bb bytes (16 of scales, then the quants).
#define PANEL_ADVANCE(bb) \
	ADDQ $bb, SI;  \
	ADDQ $34, DI;  \
	ADDQ $34, R10; \
	ADDQ $34, R12; \
	ADDQ $34, R13; \
	DECQ CX

// Q8W(c) loads Q8_0 chunk c: Y0 = signed quants, Y1 = |quants| (-128 becomes unsigned 128).
#define Q8W(c) \
	VMOVDQU 16+32*c(SI), Y0; \
	VPABSB  Y0, Y1

// Q8X adds chunk c times column P's 4 activations to acc: the activations take the weights' signs
// so that vpmaddubsw multiplies unsigned |w| by signed ±x.
#define Q8X(c, P, acc) \
	VPBROADCASTD 2+4*c(P), Y2; \
	VPSIGNB      Y0, Y2, Y2;   \
	VPMADDUBSW   Y2, Y1, Y2;   \
	VPMADDWD     Y6, Y2, Y2;   \
	VPADDD       Y2, acc, acc

// Q4W(c) decodes Q4_0 chunk c: Y0 = low nibbles (elements 4c..), Y1 = high nibbles (16+4c..).
#define Q4W(c) \
	VMOVDQU 16+32*c(SI), Y0; \
	VPSRLW  $4, Y0, Y1;   \
	VPAND   Y5, Y0, Y0;   \
	VPAND   Y5, Y1, Y1

// Q4X adds the raw nibbles q of chunk c times column P's activations to the 16-bit sums in acc.
#define Q4X(c, P, acc) \
	VPBROADCASTD 2+4*c(P), Y2;  \
	VPMADDUBSW   Y2, Y0, Y2;    \
	VPADDW       Y2, acc, acc;  \
	VPBROADCASTD 18+4*c(P), Y3; \
	VPMADDUBSW   Y3, Y1, Y3;    \
	VPADDW       Y3, acc, acc

// PSCALE converts the block's integer sums in acc and accumulates them into facc times the row
// scales (Y7) times column P's scale.
#define PSCALE(P, acc, facc) \
	VCVTDQ2PS    acc, acc;   \
	VPBROADCASTW (P), X3;    \
	VCVTPH2PS    X3, Y3;     \
	VMULPS       Y7, Y3, Y3; \
	VFMADD231PS  Y3, acc, facc

// Q4SCALE widens the 16-bit sums, subtracts 8·Σx (the int32 at S: q-8 is the weight) and scales.
#define Q4SCALE(P, S, acc, facc) \
	VPMADDWD     Y6, acc, acc; \
	VPBROADCASTD S, Y2;        \
	VPSUBD       Y2, acc, acc; \
	PSCALE(P, acc, facc)

// Column sets: chunk c for the first n columns.
#define Q8C1(c) Q8W(c); Q8X(c, DI, Y8)
#define Q8C2(c) Q8C1(c); Q8X(c, R10, Y9)
#define Q8C3(c) Q8C2(c); Q8X(c, R12, Y10)
#define Q8C4(c) Q8C3(c); Q8X(c, R13, Y11)

#define Q8BLOCK(C) C(0); C(1); C(2); C(3); C(4); C(5); C(6); C(7)

#define Q8S1 PSCALE(DI, Y8, Y12)
#define Q8S2 Q8S1; PSCALE(R10, Y9, Y13)
#define Q8S3 Q8S2; PSCALE(R12, Y10, Y14)
#define Q8S4 Q8S3; PSCALE(R13, Y11, Y15)

#define Q4C1(c) Q4W(c); Q4X(c, DI, Y8)
#define Q4C2(c) Q4C1(c); Q4X(c, R10, Y9)
#define Q4C3(c) Q4C2(c); Q4X(c, R12, Y10)
#define Q4C4(c) Q4C3(c); Q4X(c, R13, Y11)

#define Q4BLOCK(C) C(0); C(1); C(2); C(3)

#define Q4S1 Q4SCALE(DI, 0(R9), Y8, Y12)
#define Q4S2 Q4S1; Q4SCALE(R10, 4(R9), Y9, Y13)
#define Q4S3 Q4S2; Q4SCALE(R12, 8(R9), Y10, Y14)
#define Q4S4 Q4S3; Q4SCALE(R13, 12(R9), Y11, Y15)

// func q8PanelAVX2(nb int, w, x *byte, xStride, nx int, out *float32, outStride int)
TEXT ·q8PanelAVX2(SB), NOSPLIT, $0-56
	PANEL_PROLOGUE
	CMPQ R11, $2
	JLT  q8n1
	JEQ  q8n2
	CMPQ R11, $3
	JEQ  q8n3

q8n4:
	PANEL_NEXT
	Q8BLOCK(Q8C4)
	Q8S4
	PANEL_ADVANCE(272)
	JNZ  q8n4
	JMP  q8done

q8n3:
	PANEL_NEXT
	Q8BLOCK(Q8C3)
	Q8S3
	PANEL_ADVANCE(272)
	JNZ  q8n3
	JMP  q8done

q8n2:
	PANEL_NEXT
	Q8BLOCK(Q8C2)
	Q8S2
	PANEL_ADVANCE(272)
	JNZ  q8n2
	JMP  q8done

q8n1:
	PANEL_NEXT
	Q8BLOCK(Q8C1)
	Q8S1
	PANEL_ADVANCE(272)
	JNZ  q8n1

q8done:
	MOVQ outStride+48(FP), R9
	JMP  panelstore<>(SB)

// func q4PanelAVX2(nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// sums[4b+j] = 8·Σ of the quants of block b of column j (q4SumsAVX2).
TEXT ·q4PanelAVX2(SB), NOSPLIT, $0-64
	PANEL_PROLOGUE
	MOVQ sums+56(FP), R9
	CMPQ R11, $2
	JLT  q4n1
	JEQ  q4n2
	CMPQ R11, $3
	JEQ  q4n3

q4n4:
	PANEL_NEXT
	Q4BLOCK(Q4C4)
	Q4S4
	ADDQ $16, R9
	PANEL_ADVANCE(144)
	JNZ  q4n4
	JMP  q4done

q4n3:
	PANEL_NEXT
	Q4BLOCK(Q4C3)
	Q4S3
	ADDQ $16, R9
	PANEL_ADVANCE(144)
	JNZ  q4n3
	JMP  q4done

q4n2:
	PANEL_NEXT
	Q4BLOCK(Q4C2)
	Q4S2
	ADDQ $16, R9
	PANEL_ADVANCE(144)
	JNZ  q4n2
	JMP  q4done

q4n1:
	PANEL_NEXT
	Q4BLOCK(Q4C1)
	Q4S1
	ADDQ $16, R9
	PANEL_ADVANCE(144)
	JNZ  q4n1

q4done:
	MOVQ outStride+48(FP), R9
	JMP  panelstore<>(SB)

// panelstore stores the nx (R11) columns' results from Y12-Y15 at DX, R9 floats apart, and
// returns from the kernel that jumped here.
TEXT panelstore<>(SB), NOSPLIT|NOFRAME, $0
	VMOVUPS Y12, (DX)
	CMPQ    R11, $2
	JLT     psdone
	VMOVUPS Y13, (DX)(R9*4)
	CMPQ    R11, $3
	JLT     psdone
	VMOVUPS Y14, (DX)(R9*8)
	CMPQ    R11, $4
	JLT     psdone
	LEAQ    (R9)(R9*2), R9
	VMOVUPS Y15, (DX)(R9*4)

psdone:
	VZEROUPPER
	RET
