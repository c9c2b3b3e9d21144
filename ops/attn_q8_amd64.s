#include "textflag.h"

// AVX2/FMA/F16C attention kernels over a Q8_0 KV cache (see attn_q8_amd64.go; hand-written, not
// generated). A block's 32 int8 are widened 8 at a time (VPMOVSXBD, VCVTDQ2PS); its half scale d
// is converted (VCVTPH2PS) and broadcast.

// LOADD leaves the half-precision scale at (AX) as float32 in all 8 lanes of y (x its low half):
// the half broadcast to 8 words, then converted.
#define LOADD(y, x) \
	VPBROADCASTW (AX), x; \
	VCVTPH2PS    x, y

// SCOREHEAD adds q·(d·k) of one head to acc: the head's 32 queries at (R15), k's four 8-wide
// chunks, already times d, in Y9-Y12; advances R15 to the next head.
#define SCOREHEAD(acc) \
	VFMADD231PS (R15), Y9, acc;    \
	VFMADD231PS 32(R15), Y10, acc; \
	VFMADD231PS 64(R15), Y11, acc; \
	VFMADD231PS 96(R15), Y12, acc; \
	ADDQ        DX, R15

// SCOREHEAD4 is SCOREHEAD with one accumulator per chunk (a0-a3), and SCOREHEAD2 with two: with
// few heads, one accumulator a head would chain four FMAs a block and wait on their latency.
#define SCOREHEAD4(a0, a1, a2, a3) \
	VFMADD231PS (R15), Y9, a0;    \
	VFMADD231PS 32(R15), Y10, a1; \
	VFMADD231PS 64(R15), Y11, a2; \
	VFMADD231PS 96(R15), Y12, a3; \
	ADDQ        DX, R15

#define SCOREHEAD2(a0, a1) \
	VFMADD231PS (R15), Y9, a0;    \
	VFMADD231PS 32(R15), Y10, a1; \
	VFMADD231PS 64(R15), Y11, a0; \
	VFMADD231PS 96(R15), Y12, a1; \
	ADDQ        DX, R15

// STORESCORE stores float i of x at (R15) and advances R15 to the next head's row of out; it
// returns from the loop body (to nextcell) when it was the last head.
#define STORESCORE(i, x, h) \
	VEXTRACTPS $i, x, (R15); \
	ADDQ       R10, R15;     \
	CMPQ       R11, $h;      \
	JEQ        nextcell

// func attnScoresQ8AVX2(q *float32, heads, hd int, k *byte, cells *int32, n, strideB, outStride int, scale float32, out *float32)
// 1 <= heads <= 8, hd > 0 a multiple of 32, n > 0. Head h's sums stay in Yh across a cell's
// blocks (each block's k times its d, shared by the heads; with up to 4 heads, 4 or 2
// accumulators a head, folded at the end of the cell); the eight heads' sums are then
// reduced together (three rounds of VHADDPS and a lane swap) and scaled in one register.
TEXT ·attnScoresQ8AVX2(SB), NOSPLIT, $0-80
	MOVQ         q+0(FP), SI
	MOVQ         heads+8(FP), R11
	MOVQ         hd+16(FP), DX
	MOVQ         k+24(FP), DI
	MOVQ         cells+32(FP), BX
	MOVQ         n+40(FP), CX
	MOVQ         strideB+48(FP), R8
	MOVQ         outStride+56(FP), R10
	VBROADCASTSS scale+64(FP), Y14
	MOVQ         out+72(FP), R9
	MOVQ         DX, R12
	SHRQ         $5, R12   // blocks a head
	SHLQ         $2, DX    // bytes of one head's queries
	SHLQ         $2, R10   // bytes of one head's row of out

cell:
	MOVLQSX (BX), AX
	IMULQ   R8, AX
	ADDQ    DI, AX          // the cell's row
	VXORPS  Y0, Y0, Y0
	VXORPS  Y1, Y1, Y1
	VXORPS  Y2, Y2, Y2
	VXORPS  Y3, Y3, Y3
	VXORPS  Y4, Y4, Y4
	VXORPS  Y5, Y5, Y5
	VXORPS  Y6, Y6, Y6
	VXORPS  Y7, Y7, Y7
	MOVQ    R12, R13
	MOVQ    SI, R14         // the block's queries of head 0

block:
	LOADD(Y8, X8)
	VPMOVSXBD 2(AX), Y9
	VPMOVSXBD 10(AX), Y10
	VPMOVSXBD 18(AX), Y11
	VPMOVSXBD 26(AX), Y12
	VCVTDQ2PS Y9, Y9
	VCVTDQ2PS Y10, Y10
	VCVTDQ2PS Y11, Y11
	VCVTDQ2PS Y12, Y12
	VMULPS    Y8, Y9, Y9
	VMULPS    Y8, Y10, Y10
	VMULPS    Y8, Y11, Y11
	VMULPS    Y8, Y12, Y12
	MOVQ      R14, R15
	CMPQ      R11, $2
	JLE       few
	CMPQ      R11, $4
	JLE       some
	SCOREHEAD(Y0)
	CMPQ      R11, $1
	JEQ       nextblock
	SCOREHEAD(Y1)
	CMPQ      R11, $2
	JEQ       nextblock
	SCOREHEAD(Y2)
	CMPQ      R11, $3
	JEQ       nextblock
	SCOREHEAD(Y3)
	CMPQ      R11, $4
	JEQ       nextblock
	SCOREHEAD(Y4)
	CMPQ      R11, $5
	JEQ       nextblock
	SCOREHEAD(Y5)
	CMPQ      R11, $6
	JEQ       nextblock
	SCOREHEAD(Y6)
	CMPQ      R11, $7
	JEQ       nextblock
	SCOREHEAD(Y7)
	JMP       nextblock

few: // 1 or 2 heads: head h's chunk c in Y(4h+c)
	SCOREHEAD4(Y0, Y1, Y2, Y3)
	CMPQ      R11, $1
	JEQ       nextblock
	SCOREHEAD4(Y4, Y5, Y6, Y7)
	JMP       nextblock

some: // 3 or 4 heads: head h's even and odd chunks in Y(2h), Y(2h+1)
	SCOREHEAD2(Y0, Y1)
	SCOREHEAD2(Y2, Y3)
	SCOREHEAD2(Y4, Y5)
	CMPQ      R11, $3
	JEQ       nextblock
	SCOREHEAD2(Y6, Y7)

nextblock:
	ADDQ $34, AX
	ADDQ $128, R14
	DECQ R13
	JNZ  block

	// Fold the few or some heads' accumulators to one a head, in Y0-Y3 (the rest zero).
	CMPQ   R11, $2
	JLE    foldfew
	CMPQ   R11, $4
	JGT    reduce
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y1
	VADDPS Y5, Y4, Y2
	VADDPS Y7, Y6, Y3
	JMP    foldzero

foldfew:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VADDPS Y5, Y4, Y4
	VADDPS Y7, Y6, Y6
	VADDPS Y6, Y4, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

foldzero:
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

reduce:

	// Y0 = hadd(Y0, Y1) etc.: per 128-bit lane [h0 h0 h1 h1] of partial sums; then [h0 h1 h2 h3]
	// and [h4 .. h7] per lane; the lanes added: the eight heads' sums in Y8.
	VHADDPS    Y1, Y0, Y0
	VHADDPS    Y3, Y2, Y2
	VHADDPS    Y5, Y4, Y4
	VHADDPS    Y7, Y6, Y6
	VHADDPS    Y2, Y0, Y0
	VHADDPS    Y6, Y4, Y4
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x31, Y4, Y0, Y9
	VADDPS     Y9, Y8, Y8
	VMULPS     Y14, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	MOVQ       R9, R15
	STORESCORE(0, X8, 1)
	STORESCORE(1, X8, 2)
	STORESCORE(2, X8, 3)
	STORESCORE(3, X8, 4)
	STORESCORE(0, X9, 5)
	STORESCORE(1, X9, 6)
	STORESCORE(2, X9, 7)
	STORESCORE(3, X9, 8)

nextcell:
	ADDQ $4, R9
	ADDQ $4, BX
	DECQ CX
	JNZ  cell
	VZEROUPPER
	RET

// VALCHUNK widens k's chunk c (8 int8 at off(AX)) into Y15 and adds it, times each head's
// weight·d (Y12-Y14), to the heads' accumulators for that chunk.
#define VALCHUNK1(off, a0) \
	VPMOVSXBD   off(AX), Y15; \
	VCVTDQ2PS   Y15, Y15;     \
	VFMADD231PS Y15, Y12, a0

#define VALCHUNK2(off, a0, a1) \
	VALCHUNK1(off, a0); \
	VFMADD231PS Y15, Y13, a1

#define VALCHUNK3(off, a0, a1, a2) \
	VALCHUNK2(off, a0, a1); \
	VFMADD231PS Y15, Y14, a2

// VALROW sets AX to the row of the cell at (BX) (offset to the tile's block) and Y15 to its d.
#define VALROW \
	MOVLQSX (BX), AX; \
	IMULQ   R8, AX;   \
	ADDQ    DI, AX;   \
	LOADD(Y15, X15)

// VALSTORE writes a head's four accumulators to (R15) and advances R15 to the next head.
#define VALSTORE(a0, a1, a2, a3) \
	VMOVUPS a0, (R15);   \
	VMOVUPS a1, 32(R15); \
	VMOVUPS a2, 64(R15); \
	VMOVUPS a3, 96(R15); \
	ADDQ    R10, R15

// func attnValuesQ8AVX2(hb int, p *float32, n int, v *byte, cells *int32, strideB int, out *float32, hd int)
// One tile: hb (1 to 3) heads × one block of 32 values, summed over n > 0 cells in Y0-Y11 (head
// h's chunk c in Y(4h+c)), then stored. v is at the tile's block of row 0, out at head 0's 32
// values of the tile, p at head 0's weights (head stride n); hd is out's head stride. Other hb
// do nothing.
TEXT ·attnValuesQ8AVX2(SB), NOSPLIT, $0-64
	MOVQ   hb+0(FP), R11
	MOVQ   p+8(FP), R14
	MOVQ   n+16(FP), CX
	MOVQ   v+24(FP), DI
	MOVQ   cells+32(FP), BX
	MOVQ   strideB+40(FP), R8
	MOVQ   out+48(FP), R9
	MOVQ   hd+56(FP), R10
	SHLQ   $2, R10       // bytes of one head's out
	MOVQ   CX, DX
	SHLQ   $2, DX        // bytes of one head's weights
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	CMPQ   R11, $1
	JEQ    v1
	CMPQ   R11, $2
	JEQ    v2
	CMPQ   R11, $3
	JEQ    v3
	VZEROUPPER
	RET

v1:
	VALROW
	VBROADCASTSS (R14), Y12
	VMULPS       Y15, Y12, Y12
	VALCHUNK1(2, Y0)
	VALCHUNK1(10, Y1)
	VALCHUNK1(18, Y2)
	VALCHUNK1(26, Y3)
	ADDQ         $4, R14
	ADDQ         $4, BX
	DECQ         CX
	JNZ          v1
	JMP          vstore

v2:
	VALROW
	VBROADCASTSS (R14), Y12
	VBROADCASTSS (R14)(DX*1), Y13
	VMULPS       Y15, Y12, Y12
	VMULPS       Y15, Y13, Y13
	VALCHUNK2(2, Y0, Y4)
	VALCHUNK2(10, Y1, Y5)
	VALCHUNK2(18, Y2, Y6)
	VALCHUNK2(26, Y3, Y7)
	ADDQ         $4, R14
	ADDQ         $4, BX
	DECQ         CX
	JNZ          v2
	JMP          vstore

v3:
	VALROW
	VBROADCASTSS (R14), Y12
	VBROADCASTSS (R14)(DX*1), Y13
	VBROADCASTSS (R14)(DX*2), Y14
	VMULPS       Y15, Y12, Y12
	VMULPS       Y15, Y13, Y13
	VMULPS       Y15, Y14, Y14
	VALCHUNK3(2, Y0, Y4, Y8)
	VALCHUNK3(10, Y1, Y5, Y9)
	VALCHUNK3(18, Y2, Y6, Y10)
	VALCHUNK3(26, Y3, Y7, Y11)
	ADDQ         $4, R14
	ADDQ         $4, BX
	DECQ         CX
	JNZ          v3

vstore:
	MOVQ R9, R15
	VALSTORE(Y0, Y1, Y2, Y3)
	CMPQ R11, $1
	JEQ  vdone
	VALSTORE(Y4, Y5, Y6, Y7)
	CMPQ R11, $2
	JEQ  vdone
	VALSTORE(Y8, Y9, Y10, Y11)

vdone:
	VZEROUPPER
	RET

// VALCHUNKW is VALCHUNK1 with the weight in w.
#define VALCHUNKW(off, w, a) \
	VPMOVSXBD   off(AX), Y15; \
	VCVTDQ2PS   Y15, Y15;     \
	VFMADD231PS Y15, w, a

// func attnValuesQ8PairAVX2(p *float32, n int, v *byte, cells *int32, strideB int, out *float32)
// attnValuesQ8AVX2 for one head and two consecutive blocks (64 values, in Y0-Y7): one pass over
// the cells for both, halving the per-cell work of finding the row.
TEXT ·attnValuesQ8PairAVX2(SB), NOSPLIT, $0-48
	MOVQ   p+0(FP), R14
	MOVQ   n+8(FP), CX
	MOVQ   v+16(FP), DI
	MOVQ   cells+24(FP), BX
	MOVQ   strideB+32(FP), R8
	MOVQ   out+40(FP), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

pair:
	VALROW
	VPBROADCASTW 34(AX), X13
	VCVTPH2PS    X13, Y13
	VBROADCASTSS (R14), Y14
	VMULPS       Y15, Y14, Y12
	VMULPS       Y13, Y14, Y13
	VALCHUNKW(2, Y12, Y0)
	VALCHUNKW(10, Y12, Y1)
	VALCHUNKW(18, Y12, Y2)
	VALCHUNKW(26, Y12, Y3)
	VALCHUNKW(36, Y13, Y4)
	VALCHUNKW(44, Y13, Y5)
	VALCHUNKW(52, Y13, Y6)
	VALCHUNKW(60, Y13, Y7)
	ADDQ         $4, R14
	ADDQ         $4, BX
	DECQ         CX
	JNZ          pair

	VMOVUPS Y0, (R9)
	VMOVUPS Y1, 32(R9)
	VMOVUPS Y2, 64(R9)
	VMOVUPS Y3, 96(R9)
	VMOVUPS Y4, 128(R9)
	VMOVUPS Y5, 160(R9)
	VMOVUPS Y6, 192(R9)
	VMOVUPS Y7, 224(R9)
	VZEROUPPER
	RET
