#include "textflag.h"
#include "dot_q32_amd64.h"

// Q4_0 x Q8_0 and Q8_0 x Q8_0 dot products with AVX2, FMA and F16C (see dot_q8_amd64.go).
//
// func dotQ4_0AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)  (and dotQ8_0AVX2Asm)
//
// nb >= 4 blocks, a multiple of 4; 1 <= nx <= 4. The loop decodes four blocks into Y0-Y7, then
// per column reduces the four blocks' integer products into one vector (lane = block, per 128-bit
// half), converted and fused-multiply-added with the scale products d_w*d_x. Accumulators: Y12-Y15
// (columns 0-3, eight lanes summed at the end). SI weights; DI, R10, R12, R13 columns 0-3; CX
// iterations; R11 nx; DX out.

// Q4_0 nibble expansion: both halves get the 16 quant bytes, the upper half is shifted right by 4,
// masking leaves elements 0-15 (low nibbles) in the lower half and 16-31 in the upper half.
DATA ·q4shift+0(SB)/8, $0
DATA ·q4shift+8(SB)/8, $0
DATA ·q4shift+16(SB)/8, $4
DATA ·q4shift+24(SB)/8, $4
GLOBL ·q4shift(SB), RODATA|NOPTR, $32

DATA ·mask0f+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA ·mask0f+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA ·mask0f+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA ·mask0f+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL ·mask0f(SB), RODATA|NOPTR, $32

DATA eights<>+0(SB)/8, $0x0808080808080808
DATA eights<>+8(SB)/8, $0x0808080808080808
DATA eights<>+16(SB)/8, $0x0808080808080808
DATA eights<>+24(SB)/8, $0x0808080808080808
GLOBL eights<>(SB), RODATA|NOPTR, $32

DATA ·ones16+0(SB)/8, $0x0001000100010001
DATA ·ones16+8(SB)/8, $0x0001000100010001
DATA ·ones16+16(SB)/8, $0x0001000100010001
DATA ·ones16+24(SB)/8, $0x0001000100010001
GLOBL ·ones16(SB), RODATA|NOPTR, $32

// Q4DEC decodes the Q4_0 block at off(SI): w = quants-8 as signed bytes, a = |w|.
#define Q4DEC(off, w, a) \
	VBROADCASTI128 off+2(SI), w;   \
	VPSRLVQ        ·q4shift(SB), w, w; \
	VPAND          ·mask0f(SB), w, w;  \
	VPSUBB         eights<>(SB), w, w;  \
	VPSIGNB        w, w, a

// Q8DEC loads the Q8_0 block at off(SI): w = quants, a = |w| (-128 becomes unsigned 128).
#define Q8DEC(off, w, a) \
	VMOVDQU off+2(SI), w; \
	VPSIGNB w, w, a

// GATHER4(P, stride) packs the f16 scales of four blocks stride bytes apart at P into AX (block i
// in bits 16i..16i+15).
#define GATHER4(P, stride) \
	MOVWLZX (P), AX;            \
	MOVWLZX stride(P), BX;      \
	SHLL    $16, BX;            \
	ORL     BX, AX;             \
	MOVWLZX 2*stride(P), BX;    \
	SHLQ    $32, BX;            \
	ORQ     BX, AX;             \
	MOVWLZX 3*stride(P), BX;    \
	SHLQ    $48, BX;            \
	ORQ     BX, AX

// COL4_Q4 accumulates one column (activation blocks at P) over the four Q4_0 blocks in Y0-Y7
// into acc, using the weight scales in Y11. Q4_0 products are at most 8*128 in magnitude, so the
// 16-bit sums of up to 8 of them in the reduction cannot overflow.
#define COL4_Q4(P, acc) \
	PROD16(2(P), Y0, Y1, Y8);    \
	PROD16(36(P), Y2, Y3, Y9);   \
	VPHADDW Y9, Y8, Y8;          \
	PROD16(70(P), Y4, Y5, Y9);   \
	PROD16(104(P), Y6, Y7, Y10); \
	VPHADDW Y10, Y9, Y9;         \
	VPHADDW Y9, Y8, Y8;          \
	VPMADDWD ·ones16(SB), Y8, Y8; \
	COL4_TAIL(P, acc)

// COL4_Q8 is COL4_Q4 for Q8_0 weights, whose pair sums need 32 bits before the reduction.
#define COL4_Q8(P, acc) \
	PROD32(2(P), Y0, Y1, Y8);    \
	PROD32(36(P), Y2, Y3, Y9);   \
	VPHADDD Y9, Y8, Y8;          \
	PROD32(70(P), Y4, Y5, Y9);   \
	PROD32(104(P), Y6, Y7, Y10); \
	VPHADDD Y10, Y9, Y9;         \
	VPHADDD Y9, Y8, Y8;          \
	COL4_TAIL(P, acc)

// COL4_TAIL converts the four blocks' sums in Y8 and accumulates them with their scales.
#define COL4_TAIL(P, acc) \
	VCVTDQ2PS Y8, Y8;            \
	GATHER4(P, 34);              \
	HALVES(X9, Y9);              \
	VMULPS Y11, Y9, Y9;          \
	VFMADD231PS Y9, Y8, acc

// ADVANCE(wb, xb) moves the weight pointer by wb bytes and the column pointers by xb.
#define ADVANCE(wb, xb) \
	ADDQ $wb, SI;  \
	ADDQ $xb, DI;  \
	ADDQ $xb, R10; \
	ADDQ $xb, R12; \
	ADDQ $xb, R13

TEXT ·dotQ4_0AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE

q4l4:
	// Decode streams each weight once: fetch 4 KiB ahead, as the K-quant kernels do.
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	Q4DEC(0, Y0, Y1)
	Q4DEC(18, Y2, Y3)
	Q4DEC(36, Y4, Y5)
	Q4DEC(54, Y6, Y7)
	GATHER4(SI, 18)
	HALVES(X11, Y11)
	COL4_Q4(DI, Y12)
	CMPQ R11, $2
	JLT  q4c4
	COL4_Q4(R10, Y13)
	CMPQ R11, $3
	JLT  q4c4
	COL4_Q4(R12, Y14)
	CMPQ R11, $4
	JLT  q4c4
	COL4_Q4(R13, Y15)

q4c4:
	ADVANCE(72, 136)
	DECQ CX
	JNZ  q4l4

	HSUM(Y12, X12, (DX))
	CMPQ R11, $2
	JLT  q4ret
	HSUM(Y13, X13, 4(DX))
	CMPQ R11, $3
	JLT  q4ret
	HSUM(Y14, X14, 8(DX))
	CMPQ R11, $4
	JLT  q4ret
	HSUM(Y15, X15, 12(DX))

q4ret:
	VZEROUPPER
	RET

TEXT ·dotQ8_0AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE

q8l4:
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	PREFETCHT0 4224(SI)
	Q8DEC(0, Y0, Y1)
	Q8DEC(34, Y2, Y3)
	Q8DEC(68, Y4, Y5)
	Q8DEC(102, Y6, Y7)
	GATHER4(SI, 34)
	HALVES(X11, Y11)
	COL4_Q8(DI, Y12)
	CMPQ R11, $2
	JLT  q8c4
	COL4_Q8(R10, Y13)
	CMPQ R11, $3
	JLT  q8c4
	COL4_Q8(R12, Y14)
	CMPQ R11, $4
	JLT  q8c4
	COL4_Q8(R13, Y15)

q8c4:
	ADVANCE(136, 136)
	DECQ CX
	JNZ  q8l4

	HSUM(Y12, X12, (DX))
	CMPQ R11, $2
	JLT  q8ret
	HSUM(Y13, X13, 4(DX))
	CMPQ R11, $3
	JLT  q8ret
	HSUM(Y14, X14, 8(DX))
	CMPQ R11, $4
	JLT  q8ret
	HSUM(Y15, X15, 12(DX))

q8ret:
	VZEROUPPER
	RET

// func q4SumsAVX2(nb int, x *byte, xStride, nx int, mul int32, dst *int32)
// For block b < nb of activation row j < nx: dst[8b+j] = mul·Σ of its 32 quants, dst[8b+4+j]
// its f16 scale as float32 bits (q4SumsGo). |mul| <= 128: the pair sums are at most 2·128 and
// are multiplied as words.
TEXT ·q4SumsAVX2(SB), NOSPLIT, $0-48
	MOVQ         nb+0(FP), CX
	MOVQ         x+8(FP), SI
	MOVQ         xStride+16(FP), R8
	MOVQ         nx+24(FP), R11
	MOVQ         dst+40(FP), DI
	MOVL         $0x01010101, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15
	MOVL         mul+32(FP), AX
	ANDL         $0xffff, AX
	MOVL         AX, BX
	SHLL         $16, BX
	ORL          BX, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14

sblock:
	MOVQ SI, R10
	XORQ AX, AX

scol:
	VMOVDQU      2(R10), Y0
	VPMADDUBSW   Y0, Y15, Y0
	VPMADDWD     Y14, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD       X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPADDD       X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VPADDD       X1, X0, X0
	VMOVD        X0, (DI)(AX*4)
	MOVWLZX      (R10), BX
	VMOVD        BX, X2
	VCVTPH2PS    X2, X2
	VMOVD        X2, 16(DI)(AX*4)
	ADDQ         R8, R10
	INCQ         AX
	CMPQ         AX, R11
	JLT          scol
	ADDQ         $34, SI
	ADDQ         $32, DI
	DECQ         CX
	JNZ          sblock
	VZEROUPPER
	RET
