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
DATA16(·q4shift, 0, 0)
DATA16(·q4shift, 16, 4)
GLOBL ·q4shift(SB), RODATA|NOPTR, $32

CONST32(·mask0f, 0x0f0f0f0f0f0f0f0f)
CONST32(eights<>, 0x0808080808080808)
CONST32(·ones16, 0x0001000100010001)

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

// COL4_Q4 accumulates one column (activation blocks at P) over the four Q4_0 blocks in Y0-Y7
// into acc, using the weight scales in Y11. Q4_0 products are at most 8*128 in magnitude, so the
// 16-bit sums of up to 8 of them in the reduction cannot overflow.
#define COL4_Q4(P, acc) COLTREE(P, acc, PROD16, VPHADDW, WIDEN16)

// The loops' decoders: four blocks, their scales in Y11.
#define Q4BLOCKS DEC4(Q4DEC, 18)
#define Q8BLOCKS DEC4(Q8DEC, 34)

TEXT ·dotQ4_0AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	ROWLOOP(PF2, Q4BLOCKS, COL4_Q4, 72, q4l4, q4c4, q4ret)

TEXT ·dotQ8_0AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	ROWLOOP(PF3, Q8BLOCKS, COL32, 136, q8l4, q8c4, q8ret)

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
	BCAST32(0x01010101, X15, Y15)
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
