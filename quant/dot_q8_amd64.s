#include "textflag.h"

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
DATA q4shift<>+0(SB)/8, $0
DATA q4shift<>+8(SB)/8, $0
DATA q4shift<>+16(SB)/8, $4
DATA q4shift<>+24(SB)/8, $4
GLOBL q4shift<>(SB), RODATA|NOPTR, $32

DATA mask0f<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA mask0f<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA mask0f<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA mask0f<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL mask0f<>(SB), RODATA|NOPTR, $32

DATA eights<>+0(SB)/8, $0x0808080808080808
DATA eights<>+8(SB)/8, $0x0808080808080808
DATA eights<>+16(SB)/8, $0x0808080808080808
DATA eights<>+24(SB)/8, $0x0808080808080808
GLOBL eights<>(SB), RODATA|NOPTR, $32

DATA ones16<>+0(SB)/8, $0x0001000100010001
DATA ones16<>+8(SB)/8, $0x0001000100010001
DATA ones16<>+16(SB)/8, $0x0001000100010001
DATA ones16<>+24(SB)/8, $0x0001000100010001
GLOBL ones16<>(SB), RODATA|NOPTR, $32

// Q4DEC decodes the Q4_0 block at off(SI): w = quants-8 as signed bytes, a = |w|.
#define Q4DEC(off, w, a) \
	VBROADCASTI128 off+2(SI), w;   \
	VPSRLVQ        q4shift<>(SB), w, w; \
	VPAND          mask0f<>(SB), w, w;  \
	VPSUBB         eights<>(SB), w, w;  \
	VPSIGNB        w, w, a

// Q8DEC loads the Q8_0 block at off(SI): w = quants, a = |w| (-128 becomes unsigned 128).
#define Q8DEC(off, w, a) \
	VMOVDQU off+2(SI), w; \
	VPSIGNB w, w, a

// PROD16 leaves in t the 16 int16 pair sums of the weights (w, a = |w|) times the 32 activation
// quants at addr: the quants take the weights' signs so that vpmaddubsw multiplies unsigned |w|
// by signed ±x.
#define PROD16(addr, w, a, t) \
	VMOVDQU    addr, t;  \
	VPSIGNB    w, t, t;  \
	VPMADDUBSW t, a, t

// PROD32 is PROD16 summed further into 8 int32s.
#define PROD32(addr, w, a, t) \
	PROD16(addr, w, a, t); \
	VPMADDWD ones16<>(SB), t, t

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

// HALVES converts the four f16s in AX into [h0 h1 h2 h3 | h0 h1 h2 h3] in Y (low half X).
#define HALVES(X, Y) \
	VMOVQ        AX, X; \
	VPBROADCASTQ X, X;  \
	VCVTPH2PS    X, Y

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
	VPMADDWD ones16<>(SB), Y8, Y8; \
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

// HSUM stores the sum of the 8 floats of acc (low half accx) at dst.
#define HSUM(acc, accx, dst) \
	VEXTRACTF128 $1, acc, X0;  \
	VADDPS       X0, accx, X0; \
	VMOVHLPS     X0, X0, X1;   \
	VADDPS       X1, X0, X0;   \
	VMOVSHDUP    X0, X1;       \
	VADDSS       X1, X0, X0;   \
	VMOVSS       X0, dst

#define PROLOGUE \
	MOVQ   nb+0(FP), CX;        \
	MOVQ   w+8(FP), SI;         \
	MOVQ   x+16(FP), DI;        \
	MOVQ   xStride+24(FP), R8;  \
	MOVQ   nx+32(FP), R11;      \
	MOVQ   out+40(FP), DX;      \
	LEAQ   (DI)(R8*1), R10;     \
	LEAQ   (DI)(R8*2), R12;     \
	LEAQ   (R10)(R8*2), R13;    \
	VXORPS Y12, Y12, Y12;       \
	VXORPS Y13, Y13, Y13;       \
	VXORPS Y14, Y14, Y14;       \
	VXORPS Y15, Y15, Y15;       \
	SHRQ   $2, CX

// ---- 8-row tiles for MatMul (see matmulTiled in dot_q8_amd64.go) ----
//
// A tile holds 8 rows repacked so that chunk c (32 bytes) holds elements 4c..4c+3 of row r in
// dword lane r: the products of a block accumulate vertically, one lane per row. Blocks are
// multiples of 64 bytes in a 64-byte aligned tile. Q8_0 (576 bytes): 8 chunks of signed quants,
// the same as absolute values (vpsignb + vpmaddubsw as above), the 8 f16 scales at 512, padding.
// Q4_0 (320 bytes): 8 chunks of raw nibbles q in [0, 15], multiplied by the activations directly;
// Σ(q-8)·x is completed by subtracting 8·Σx from q4SumsAVX2. Scales at 256, padding.

// RDEC4 expands the Q4_0 quants (16 bytes) at addr into 32 bytes q in [0, 15] in w.
#define RDEC4(addr, w) \
	VBROADCASTI128 addr, w;              \
	VPSRLVQ        q4shift<>(SB), w, w;  \
	VPAND          mask0f<>(SB), w, w

#define RDEC8(addr, w) \
	VMOVDQU addr, w

// REPACK_SCALES(off) copies the f16 scales of the 8 rows (at SI and R10, stride R8, R9 = 3*R8)
// to off(DI).
#define REPACK_SCALES(off) \
	MOVW (SI), AX;         \
	MOVW AX, off+0(DI);      \
	MOVW (SI)(R8*1), AX;   \
	MOVW AX, off+2(DI);      \
	MOVW (SI)(R8*2), AX;   \
	MOVW AX, off+4(DI);      \
	MOVW (SI)(R9*1), AX;   \
	MOVW AX, off+6(DI);      \
	MOVW (R10), AX;        \
	MOVW AX, off+8(DI);      \
	MOVW (R10)(R8*1), AX;  \
	MOVW AX, off+10(DI);      \
	MOVW (R10)(R8*2), AX;  \
	MOVW AX, off+12(DI);      \
	MOVW (R10)(R9*1), AX;  \
	MOVW AX, off+14(DI)

// REPACK_QUANTS(DEC, ST) decodes the 8 rows' quants with DEC into Y0-Y7, transposes them as 8x8
// dwords and stores the chunks at DI with ST.
#define REPACK_QUANTS(DEC, ST) \
	DEC(2(SI), Y0);                 \
	DEC(2(SI)(R8*1), Y1);           \
	DEC(2(SI)(R8*2), Y2);           \
	DEC(2(SI)(R9*1), Y3);           \
	DEC(2(R10), Y4);                \
	DEC(2(R10)(R8*1), Y5);          \
	DEC(2(R10)(R8*2), Y6);          \
	DEC(2(R10)(R9*1), Y7);          \
	VPUNPCKLDQ  Y1, Y0, Y8;         \
	VPUNPCKHDQ  Y1, Y0, Y9;         \
	VPUNPCKLDQ  Y3, Y2, Y10;        \
	VPUNPCKHDQ  Y3, Y2, Y11;        \
	VPUNPCKLDQ  Y5, Y4, Y12;        \
	VPUNPCKHDQ  Y5, Y4, Y13;        \
	VPUNPCKLDQ  Y7, Y6, Y14;        \
	VPUNPCKHDQ  Y7, Y6, Y15;        \
	VPUNPCKLQDQ Y10, Y8, Y0;        \
	VPUNPCKHQDQ Y10, Y8, Y1;        \
	VPUNPCKLQDQ Y11, Y9, Y2;        \
	VPUNPCKHQDQ Y11, Y9, Y3;        \
	VPUNPCKLQDQ Y14, Y12, Y4;       \
	VPUNPCKHQDQ Y14, Y12, Y5;       \
	VPUNPCKLQDQ Y15, Y13, Y6;       \
	VPUNPCKHQDQ Y15, Y13, Y7;       \
	VPERM2I128  $0x20, Y4, Y0, Y8;  \
	VPERM2I128  $0x31, Y4, Y0, Y12; \
	VPERM2I128  $0x20, Y5, Y1, Y9;  \
	VPERM2I128  $0x31, Y5, Y1, Y13; \
	VPERM2I128  $0x20, Y6, Y2, Y10; \
	VPERM2I128  $0x31, Y6, Y2, Y14; \
	VPERM2I128  $0x20, Y7, Y3, Y11; \
	VPERM2I128  $0x31, Y7, Y3, Y15; \
	ST(Y8, 0);                  \
	ST(Y9, 1);                  \
	ST(Y10, 2);                 \
	ST(Y11, 3);                 \
	ST(Y12, 4);                 \
	ST(Y13, 5);                 \
	ST(Y14, 6);                 \
	ST(Y15, 7)

// RSTORE4 stores chunk c (register y); RSTORE8 also its absolute value.
#define RSTORE4(y, c) \
	VMOVDQU y, 32*c(DI)

#define RSTORE8(y, c) \
	VMOVDQU y, 32*c(DI);    \
	VPSIGNB y, y, y;        \
	VMOVDQU y, 256+32*c(DI)

#define REPACK_PROLOGUE \
	MOVQ nb+0(FP), CX;          \
	MOVQ w+8(FP), SI;           \
	MOVQ rowStride+16(FP), R8;  \
	MOVQ dst+24(FP), DI;        \
	LEAQ (R8)(R8*2), R9;        \
	LEAQ (SI)(R8*4), R10

// TPROD8 leaves in Y2 the 16-bit pair sums of Q8_0 chunk c of the tile block at SI times the 4
// activation bytes at 2+4c(P).
#define TPROD8(c, P) \
	VPBROADCASTD 2+4*c(P), Y2;        \
	VPSIGNB      32*c(SI), Y2, Y2;    \
	VMOVDQU      256+32*c(SI), Y1;    \
	VPMADDUBSW   Y2, Y1, Y2

// TPROD4 is TPROD8 for a Q4_0 chunk (raw nibbles times the activations).
#define TPROD4(c, P) \
	VPBROADCASTD 2+4*c(P), Y2;  \
	VMOVDQU      32*c(SI), Y1;  \
	VPMADDUBSW   Y2, Y1, Y2

// TCH4 adds Q4_0 chunk c to the 16-bit sums in Y3: 16 products of q <= 15 and |x| <= 128 per
// lane fit.
#define TCH4(c, P) \
	TPROD4(c, P); \
	VPADDW Y2, Y3, Y3

// TCH8 adds Q8_0 chunk c to the 32-bit sums in Y3 (Q8_0 pair sums need 32 bits).
#define TCH8(c, P) \
	TPROD8(c, P);                   \
	VPMADDWD ones16<>(SB), Y2, Y2;  \
	VPADDD   Y2, Y3, Y3

// TSCALE converts the block sums in Y3 to float and accumulates them into acc with the scale
// products (rows' scales in Y7 times the column's scale at P).
#define TSCALE(P, acc) \
	VCVTDQ2PS    Y3, Y3;      \
	VPBROADCASTW (P), X2;     \
	VCVTPH2PS    X2, Y2;      \
	VMULPS       Y7, Y2, Y2;  \
	VFMADD231PS  Y2, Y3, acc

// TCOL4 / TCOL8 accumulate the tile block at SI times the activation block at P into acc (lane
// r = row r). TCOL4 subtracts 8·Σx, the int32 at S.
#define TCOL4(P, S, acc) \
	TPROD4(0, P);                   \
	VMOVDQA  Y2, Y3;                \
	TCH4(1, P);                     \
	TCH4(2, P);                     \
	TCH4(3, P);                     \
	TCH4(4, P);                     \
	TCH4(5, P);                     \
	TCH4(6, P);                     \
	TCH4(7, P);                     \
	VPMADDWD ones16<>(SB), Y3, Y3;  \
	VPBROADCASTD S, Y2;             \
	VPSUBD   Y2, Y3, Y3;            \
	TSCALE(P, acc)

#define TCOL8(P, acc) \
	TPROD8(0, P);                   \
	VPMADDWD ones16<>(SB), Y2, Y3;  \
	TCH8(1, P);                     \
	TCH8(2, P);                     \
	TCH8(3, P);                     \
	TCH8(4, P);                     \
	TCH8(5, P);                     \
	TCH8(6, P);                     \
	TCH8(7, P);                     \
	TSCALE(P, acc)

#define TILE_PROLOGUE \
	MOVQ   nb+0(FP), CX;          \
	MOVQ   tile+8(FP), SI;        \
	MOVQ   x+16(FP), DI;          \
	MOVQ   xStride+24(FP), R8;    \
	MOVQ   nx+32(FP), R11;        \
	MOVQ   out+40(FP), DX;        \
	MOVQ   outStride+48(FP), R9;  \
	LEAQ   (DI)(R8*1), R10;       \
	LEAQ   (DI)(R8*2), R12;       \
	LEAQ   (R10)(R8*2), R13;      \
	VXORPS Y12, Y12, Y12;         \
	VXORPS Y13, Y13, Y13;         \
	VXORPS Y14, Y14, Y14;         \
	VXORPS Y15, Y15, Y15

#define TILE_ADVANCE(bb) \
	ADDQ $bb, SI;  \
	ADDQ $34, DI;  \
	ADDQ $34, R10; \
	ADDQ $34, R12; \
	ADDQ $34, R13; \
	DECQ CX

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

// func q4RepackAVX2(nb int, w *byte, rowStride int, dst *byte)
TEXT ·q4RepackAVX2(SB), NOSPLIT, $0-32
	REPACK_PROLOGUE

r4loop:
	REPACK_SCALES(256)
	REPACK_QUANTS(RDEC4, RSTORE4)
	ADDQ $18, SI
	ADDQ $18, R10
	ADDQ $320, DI
	DECQ CX
	JNZ  r4loop
	VZEROUPPER
	RET

// func q8RepackAVX2(nb int, w *byte, rowStride int, dst *byte)
TEXT ·q8RepackAVX2(SB), NOSPLIT, $0-32
	REPACK_PROLOGUE

r8loop:
	REPACK_SCALES(512)
	REPACK_QUANTS(RDEC8, RSTORE8)
	ADDQ $34, SI
	ADDQ $34, R10
	ADDQ $576, DI
	DECQ CX
	JNZ  r8loop
	VZEROUPPER
	RET

// func q4TileAVX2(nb int, tile, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// out[j*outStride+r] = row r of the tile · activation row j, for r < 8 and j < nx (1..4); sums
// holds 8·Σx of block b of column j at index 4b+j (see q4SumsAVX2).
TEXT ·q4TileAVX2(SB), NOSPLIT, $0-64
	TILE_PROLOGUE
	MOVQ sums+56(FP), BX

t4loop:
	VCVTPH2PS 256(SI), Y7
	TCOL4(DI, (BX), Y12)
	CMPQ      R11, $2
	JLT       t4next
	TCOL4(R10, 4(BX), Y13)
	CMPQ      R11, $3
	JLT       t4next
	TCOL4(R12, 8(BX), Y14)
	CMPQ      R11, $4
	JLT       t4next
	TCOL4(R13, 12(BX), Y15)

t4next:
	ADDQ $16, BX
	TILE_ADVANCE(320)
	JNZ t4loop
	JMP tilestore<>(SB)

// func q8TileAVX2(nb int, tile, x *byte, xStride, nx int, out *float32, outStride int)
TEXT ·q8TileAVX2(SB), NOSPLIT, $0-56
	TILE_PROLOGUE

t8loop:
	VCVTPH2PS 512(SI), Y7
	TCOL8(DI, Y12)
	CMPQ      R11, $2
	JLT       t8next
	TCOL8(R10, Y13)
	CMPQ      R11, $3
	JLT       t8next
	TCOL8(R12, Y14)
	CMPQ      R11, $4
	JLT       t8next
	TCOL8(R13, Y15)

t8next:
	TILE_ADVANCE(576)
	JNZ t8loop
	JMP tilestore<>(SB)

// tilestore stores the nx (R11) columns' results from Y12-Y15 at DX, R9 floats apart, and
// returns from the tile function that jumped here.
TEXT tilestore<>(SB), NOSPLIT|NOFRAME, $0
	VMOVUPS Y12, (DX)
	CMPQ    R11, $2
	JLT     tsdone
	VMOVUPS Y13, (DX)(R9*4)
	CMPQ    R11, $3
	JLT     tsdone
	VMOVUPS Y14, (DX)(R9*8)
	CMPQ    R11, $4
	JLT     tsdone
	LEAQ    (R9)(R9*2), R9
	VMOVUPS Y15, (DX)(R9*4)

tsdone:
	VZEROUPPER
	RET

// func q4SumsAVX2(nb int, x *byte, xStride, nx int, dst *int32)
// dst[4b+j] = 8·Σ of the 32 quants of block b of activation row j, for b < nb and j < nx.
TEXT ·q4SumsAVX2(SB), NOSPLIT, $0-40
	MOVQ         nb+0(FP), CX
	MOVQ         x+8(FP), SI
	MOVQ         xStride+16(FP), R8
	MOVQ         nx+24(FP), R11
	MOVQ         dst+32(FP), DI
	MOVL         $0x01010101, AX
	VMOVD        AX, X15
	VPBROADCASTD X15, Y15
	MOVL         $0x00080008, AX
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
	ADDQ         R8, R10
	INCQ         AX
	CMPQ         AX, R11
	JLT          scol
	ADDQ         $34, SI
	ADDQ         $16, DI
	DECQ         CX
	JNZ          sblock
	VZEROUPPER
	RET
