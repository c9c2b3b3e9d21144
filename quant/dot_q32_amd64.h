// Macros shared by the AVX2 row kernels of the 32-element block types against Q8_0 activations
// (dot_q8_amd64.s: Q4_0, Q8_0; dot_q32_amd64.s: Q5_0, Q5_1, Q4_1, IQ4_NL): the frame, the loop,
// the products and the sums, which are the same instructions in all. The tables ·q4shift,
// ·mask0f and ·ones16 are defined in dot_q8_amd64.s.

#include "simd_amd64.h"

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
	VPMADDWD ·ones16(SB), t, t

// HALVES converts the four f16s in AX into [h0 h1 h2 h3 | h0 h1 h2 h3] in Y (low half X).
#define HALVES(X, Y) \
	VMOVQ        AX, X; \
	VPBROADCASTQ X, X;  \
	VCVTPH2PS    X, Y

// The kernels' arguments: (nb int, w, x *byte, xStride, nx int, out *float32), frame $0-48. CX
// counts the groups of four blocks.
#define PROLOGUE \
	MOVQ nb+0(FP), CX;                 \
	ROW_ARGS;                          \
	COLUMNS;                           \
	CLEAR4(VXORPS, Y12, Y13, Y14, Y15); \
	SHRQ $2, CX

// GATHER4(off, P, stride) packs the four f16s at off(P), off+stride(P), ... into AX (the i-th in
// bits 16i..16i+15).
#define GATHER4(off, P, stride) \
	MOVWLZX off(P), AX;            \
	MOVWLZX off+stride(P), BX;     \
	SHLL    $16, BX;               \
	ORL     BX, AX;                \
	MOVWLZX off+2*stride(P), BX;   \
	SHLQ    $32, BX;               \
	ORQ     BX, AX;                \
	MOVWLZX off+3*stride(P), BX;   \
	SHLQ    $48, BX;               \
	ORQ     BX, AX

// DEC4 decodes the four blocks of bs bytes at SI with DEC(off, w, a) into the pairs Y0/Y1 ..
// Y6/Y7 and their f16 scales (at the blocks' starts) into Y11.
#define DEC4(DEC, bs) \
	DEC(0, Y0, Y1);      \
	DEC(bs, Y2, Y3);     \
	DEC(2*bs, Y4, Y5);   \
	DEC(3*bs, Y6, Y7);   \
	GATHER4(0, SI, bs);  \
	HALVES(X11, Y11)

// FOLD converts the four blocks' integer sums in Y8 and accumulates them with the weight scales
// in Y11 times the column's activation scales at P.
#define FOLD(P, acc) \
	VCVTDQ2PS Y8, Y8;   \
	GATHER4(0, P, 34);  \
	HALVES(X9, Y9);     \
	VMULPS Y11, Y9, Y9; \
	VFMADD231PS Y9, Y8, acc

// COLTREE accumulates one column (activation blocks at P) over the four blocks of DEC4 into acc:
// PROD (PROD16 or PROD32) per block, reduced pairwise with HADD (VPHADDW or VPHADDD: lane i of
// the result is block i), WIDEN (the int16 sums to int32, or nothing), then FOLD.
#define COLTREE(P, acc, PROD, HADD, WIDEN) \
	PROD(2(P), Y0, Y1, Y8);    \
	PROD(36(P), Y2, Y3, Y9);   \
	HADD Y9, Y8, Y8;           \
	PROD(70(P), Y4, Y5, Y9);   \
	PROD(104(P), Y6, Y7, Y10); \
	HADD Y10, Y9, Y9;          \
	HADD Y9, Y8, Y8;           \
	WIDEN;                     \
	FOLD(P, acc)

#define NOWIDEN
#define WIDEN16 VPMADDWD ·ones16(SB), Y8, Y8

// COL32 is COLTREE for the blocks whose pair sums need 32 bits before the reduction (Q8_0,
// IQ4_NL).
#define COL32(P, acc) COLTREE(P, acc, PROD32, VPHADDD, NOWIDEN)

// COLS runs col(P, acc) for the first nx columns, then jumps to next.
#define COLS(col, next) \
	col(DI, Y12);  \
	CMPQ R11, $2;  \
	JLT  next;     \
	col(R10, Y13); \
	CMPQ R11, $3;  \
	JLT  next;     \
	col(R12, Y14); \
	CMPQ R11, $4;  \
	JLT  next;     \
	col(R13, Y15)

// EPILOGUE stores the first nx sums.
#define EPILOGUE(ret) \
	HSUM(Y12, X12, (DX), X0, X1);  \
	CMPQ R11, $2;                  \
	JLT  ret;                      \
	HSUM(Y13, X13, 4(DX), X0, X1); \
	CMPQ R11, $3;                  \
	JLT  ret;                      \
	HSUM(Y14, X14, 8(DX), X0, X1); \
	CMPQ R11, $4;                  \
	JLT  ret;                      \
	HSUM(Y15, X15, 12(DX), X0, X1)

// Prefetches 4 KiB ahead of the weights (decode streams each weight once), two or three cache
// lines per iteration.
#define PF2 PREFETCHT0 4096(SI); PREFETCHT0 4160(SI)
#define PF3 PF2; PREFETCHT0 4224(SI)

// ROWLOOP is a kernel's body after PROLOGUE and its constants: for each group of four blocks
// (wb bytes of weights, four Q8_0 blocks of each column) PF, DECODE, then col(P, acc) for the
// nx columns; then the stores and the return. loop, next and ret are its labels.
#define ROWLOOP(PF, DECODE, col, wb, loop, next, ret) \
loop:                   \
	PF;                 \
	DECODE;             \
	COLS(col, next);    \
next:                   \
	ADDQ $wb, SI;       \
	ADDQ $136, DI;      \
	ADDQ $136, R10;     \
	ADDQ $136, R12;     \
	ADDQ $136, R13;     \
	DECQ CX;            \
	JNZ  loop;          \
	EPILOGUE(ret);      \
ret:                    \
	VZEROUPPER;         \
	RET
