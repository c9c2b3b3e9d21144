#include "textflag.h"
#include "dot_q32_amd64.h"

// Q5_0, IQ4_NL, Q4_1 and Q5_1 x Q8_0 dot products with AVX2, FMA and F16C (see dot_q32_amd64.go).
//
// func dotQ5_0AVX2Asm(nb int, w, x *byte, xStride, nx int, out *float32)  (and the others)
//
// nb >= 4 blocks, a multiple of 4; 1 <= nx <= 4. As in dot_q8_amd64.s, each loop iteration
// decodes four weight blocks (32 level bytes each, element order), then per column reduces the
// four blocks' integer products into one vector (lane = block, per 128-bit half) that is converted
// and fused-multiply-added with the blocks' scale products. Accumulators: Y12-Y15 (columns 0-3,
// eight lanes summed at the end). SI weights; DI, R10, R12, R13 columns 0-3; CX iterations; R11
// nx; DX out.
//
// Signed levels (Q5_0 in [-16, 15], IQ4_NL table values in [-127, 113]) are multiplied as in
// ggml: vpsignb gives the activation quants the weights' signs so that vpmaddubsw can multiply
// |w| (unsigned) by ±x. Unsigned levels (Q4_1 in [0, 15], Q5_1 in [0, 31]) go to vpmaddubsw as
// they are; their min term needs Σx per block, which a vpmaddubsw with bytes of 1 sums.
//
// Integer ranges (activation quants in [-127, 127], as QuantizeAct writes them): vpmaddubsw pair
// sums stay below 2·127·128 = 32512, so none saturates. Q5_0 (|w| <= 16), Q4_1 and Q5_1
// (w <= 31) then sum up to 8 products in 16 bits (<= 8·31·128 = 31744) before vpmaddwd widens
// them; IQ4_NL widens the pair sums at once.

DATA maskf0<>+0(SB)/8, $0xf0f0f0f0f0f0f0f0
DATA maskf0<>+8(SB)/8, $0xf0f0f0f0f0f0f0f0
DATA maskf0<>+16(SB)/8, $0xf0f0f0f0f0f0f0f0
DATA maskf0<>+24(SB)/8, $0xf0f0f0f0f0f0f0f0
GLOBL maskf0<>(SB), RODATA|NOPTR, $32

DATA mask10<>+0(SB)/8, $0x1010101010101010
DATA mask10<>+8(SB)/8, $0x1010101010101010
DATA mask10<>+16(SB)/8, $0x1010101010101010
DATA mask10<>+24(SB)/8, $0x1010101010101010
GLOBL mask10<>(SB), RODATA|NOPTR, $32

DATA ones8<>+0(SB)/8, $0x0101010101010101
DATA ones8<>+8(SB)/8, $0x0101010101010101
DATA ones8<>+16(SB)/8, $0x0101010101010101
DATA ones8<>+24(SB)/8, $0x0101010101010101
GLOBL ones8<>(SB), RODATA|NOPTR, $32

DATA allff<>+0(SB)/8, $-1
DATA allff<>+8(SB)/8, $-1
DATA allff<>+16(SB)/8, $-1
DATA allff<>+24(SB)/8, $-1
GLOBL allff<>(SB), RODATA|NOPTR, $32

// bitshuf spreads a broadcast uint32 so that byte i holds its byte i/8; bitmask then has every bit
// set but bit i%8 of byte i, so that the byte is all ones exactly when bit i of the uint32 is set.
DATA bitshuf<>+0(SB)/8, $0x0000000000000000
DATA bitshuf<>+8(SB)/8, $0x0101010101010101
DATA bitshuf<>+16(SB)/8, $0x0202020202020202
DATA bitshuf<>+24(SB)/8, $0x0303030303030303
GLOBL bitshuf<>(SB), RODATA|NOPTR, $32

DATA bitmask<>+0(SB)/8, $0x7fbfdfeff7fbfdfe
DATA bitmask<>+8(SB)/8, $0x7fbfdfeff7fbfdfe
DATA bitmask<>+16(SB)/8, $0x7fbfdfeff7fbfdfe
DATA bitmask<>+24(SB)/8, $0x7fbfdfeff7fbfdfe
GLOBL bitmask<>(SB), RODATA|NOPTR, $32

// iq4tab is kvalues_iq4nl in both lanes: -127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113.
DATA iq4tab<>+0(SB)/8, $0xf6eaddcfbfad9881
DATA iq4tab<>+8(SB)/8, $0x7159453526190d01
DATA iq4tab<>+16(SB)/8, $0xf6eaddcfbfad9881
DATA iq4tab<>+24(SB)/8, $0x7159453526190d01
GLOBL iq4tab<>(SB), RODATA|NOPTR, $32

// NIBBLES loads the 16 quant bytes at addr into both halves of v as the 32 element nibbles: low
// nibbles (elements 0-15) in the lower half, high nibbles (16-31) in the upper half.
#define NIBBLES(addr, v) \
	VBROADCASTI128 addr, v;         \
	VPSRLVQ        ·q4shift(SB), v, v; \
	VPAND          ·mask0f(SB), v, v

// HIBITS sets byte i of t to 0xff where bit i of the uint32 at addr is set, else 0.
#define HIBITS(addr, t) \
	VPBROADCASTD addr, t;             \
	VPSHUFB      bitshuf<>(SB), t, t; \
	VPOR         bitmask<>(SB), t, t; \
	VPCMPEQB     allff<>(SB), t, t

// Q50DEC decodes the Q5_0 block at off(SI): w = levels-16 as signed bytes (a level without its
// fifth bit is the nibble with 0xf0 ORed in), a = |w|. Clobbers Y8.
#define Q50DEC(off, w, a) \
	NIBBLES(off+6(SI), w);         \
	HIBITS(off+2(SI), Y8);         \
	VPANDN maskf0<>(SB), Y8, Y8;   \
	VPOR   Y8, w, w;               \
	VPSIGNB w, w, a

// IQ4DEC decodes the IQ4_NL block at off(SI) with the table in Y8: w = table values, a = |w|.
#define IQ4DEC(off, w, a) \
	NIBBLES(off+2(SI), w); \
	VPSHUFB w, Y8, w;      \
	VPSIGNB w, w, a

// Q51DEC decodes the Q5_1 block at off(SI) into the unsigned levels u. Clobbers Y8.
#define Q51DEC(off, u) \
	NIBBLES(off+8(SI), u);       \
	HIBITS(off+4(SI), Y8);       \
	VPAND mask10<>(SB), Y8, Y8;  \
	VPOR  Y8, u, u

// GATHER4(addr0, stride) packs the four f16s at addr0, addr0+stride, ... into AX (the i-th in
// bits 16i..16i+15). addr0 is an offset(register) operand written as off, P.
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

// TREE16 reduces the int16 pair sums of four blocks (t0..t3, lane i of the result = block i)
// into int32s in t0, clobbering t1-t3.
#define TREE16(t0, t1, t2, t3) \
	VPHADDW  t1, t0, t0; \
	VPHADDW  t3, t2, t2; \
	VPHADDW  t2, t0, t0; \
	VPMADDWD ·ones16(SB), t0, t0

// FOLD converts the four blocks' integer sums in Y8 and accumulates them with the weight scales
// in Y11 times the column's activation scales at P.
#define FOLD(P, acc) \
	VCVTDQ2PS Y8, Y8;   \
	GATHER4(0, P, 34);  \
	HALVES(X9, Y9);     \
	VMULPS Y11, Y9, Y9; \
	VFMADD231PS Y9, Y8, acc

// COL_Q50 accumulates one column (activation blocks at P) over the four Q5_0 blocks in Y0-Y7.
#define COL_Q50(P, acc) \
	PROD16(2(P), Y0, Y1, Y8);    \
	PROD16(36(P), Y2, Y3, Y9);   \
	PROD16(70(P), Y4, Y5, Y10);  \
	VPHADDW Y9, Y8, Y8;          \
	PROD16(104(P), Y6, Y7, Y9);  \
	VPHADDW Y9, Y10, Y10;        \
	VPHADDW Y10, Y8, Y8;         \
	VPMADDWD ·ones16(SB), Y8, Y8; \
	FOLD(P, acc)

// COL_IQ4 is COL_Q50 for IQ4_NL, whose pair sums need 32 bits before the reduction.
#define COL_IQ4(P, acc) \
	PROD32(2(P), Y0, Y1, Y8);    \
	PROD32(36(P), Y2, Y3, Y9);   \
	VPHADDD Y9, Y8, Y8;          \
	PROD32(70(P), Y4, Y5, Y9);   \
	PROD32(104(P), Y6, Y7, Y10); \
	VPHADDD Y10, Y9, Y9;         \
	VPHADDD Y9, Y8, Y8;          \
	FOLD(P, acc)

// COL_MIN accumulates one column over the four Q4_1/Q5_1 blocks in Y0-Y3 (unsigned levels),
// with the weight scales in Y11, the mins in Y5 and bytes of 1 in Y4:
// acc += d_w·d_x·(levels·quants) + m_w·d_x·Σquants.
#define COL_MIN(P, acc) \
	VPMADDUBSW 2(P), Y0, Y8;    \
	VPMADDUBSW 36(P), Y1, Y9;   \
	VPMADDUBSW 70(P), Y2, Y10;  \
	VPMADDUBSW 104(P), Y3, Y6;  \
	TREE16(Y8, Y9, Y10, Y6);    \
	VPMADDUBSW 2(P), Y4, Y9;    \
	VPMADDUBSW 36(P), Y4, Y10;  \
	VPMADDUBSW 70(P), Y4, Y6;   \
	VPMADDUBSW 104(P), Y4, Y7;  \
	TREE16(Y9, Y10, Y6, Y7);    \
	VCVTDQ2PS Y8, Y8;           \
	VCVTDQ2PS Y9, Y9;           \
	GATHER4(0, P, 34);          \
	HALVES(X10, Y10);           \
	VMULPS Y11, Y10, Y6;        \
	VFMADD231PS Y6, Y8, acc;    \
	VMULPS Y5, Y10, Y6;         \
	VFMADD231PS Y6, Y9, acc

// ADVANCE(wb) moves the weight pointer by wb bytes and the column pointers by four Q8_0 blocks.
#define ADVANCE(wb) \
	ADDQ $wb, SI;   \
	ADDQ $136, DI;  \
	ADDQ $136, R10; \
	ADDQ $136, R12; \
	ADDQ $136, R13

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

// EPILOGUE stores the first nx sums and returns.
#define EPILOGUE(ret) \
	HSUM(Y12, X12, (DX));  \
	CMPQ R11, $2;          \
	JLT  ret;              \
	HSUM(Y13, X13, 4(DX)); \
	CMPQ R11, $3;          \
	JLT  ret;              \
	HSUM(Y14, X14, 8(DX)); \
	CMPQ R11, $4;          \
	JLT  ret;              \
	HSUM(Y15, X15, 12(DX))

TEXT ·dotQ5_0AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE

q50loop:
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	Q50DEC(0, Y0, Y1)
	Q50DEC(22, Y2, Y3)
	Q50DEC(44, Y4, Y5)
	Q50DEC(66, Y6, Y7)
	GATHER4(0, SI, 22)
	HALVES(X11, Y11)
	COLS(COL_Q50, q50next)

q50next:
	ADVANCE(88)
	DECQ CX
	JNZ  q50loop
	EPILOGUE(q50ret)

q50ret:
	VZEROUPPER
	RET

TEXT ·dotIQ4NLAVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE

iq4loop:
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	VMOVDQU iq4tab<>(SB), Y8
	IQ4DEC(0, Y0, Y1)
	IQ4DEC(18, Y2, Y3)
	IQ4DEC(36, Y4, Y5)
	IQ4DEC(54, Y6, Y7)
	GATHER4(0, SI, 18)
	HALVES(X11, Y11)
	COLS(COL_IQ4, iq4next)

iq4next:
	ADVANCE(72)
	DECQ CX
	JNZ  iq4loop
	EPILOGUE(iq4ret)

iq4ret:
	VZEROUPPER
	RET

TEXT ·dotQ4_1AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	VMOVDQU ones8<>(SB), Y4

q41loop:
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	NIBBLES(4(SI), Y0)
	NIBBLES(24(SI), Y1)
	NIBBLES(44(SI), Y2)
	NIBBLES(64(SI), Y3)
	GATHER4(0, SI, 20)
	HALVES(X11, Y11)
	GATHER4(2, SI, 20)
	HALVES(X5, Y5)
	COLS(COL_MIN, q41next)

q41next:
	ADVANCE(80)
	DECQ CX
	JNZ  q41loop
	EPILOGUE(q41ret)

q41ret:
	VZEROUPPER
	RET

TEXT ·dotQ5_1AVX2Asm(SB), NOSPLIT, $0-48
	PROLOGUE
	VMOVDQU ones8<>(SB), Y4

q51loop:
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	Q51DEC(0, Y0)
	Q51DEC(24, Y1)
	Q51DEC(48, Y2)
	Q51DEC(72, Y3)
	GATHER4(0, SI, 24)
	HALVES(X11, Y11)
	GATHER4(2, SI, 24)
	HALVES(X5, Y5)
	COLS(COL_MIN, q51next)

q51next:
	ADVANCE(96)
	DECQ CX
	JNZ  q51loop
	EPILOGUE(q51ret)

q51ret:
	VZEROUPPER
	RET
