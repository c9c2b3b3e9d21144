#include "textflag.h"

// Peak-throughput loops (peak.go): each iteration issues 24 products (AVX2: 12 products of
// three or, with the sign, four instructions) into 12 (AVX2: 6) independent accumulators, enough to cover the latency of every instruction here at the
// throughput of two per cycle, and nothing else but the loop counter. The register contents
// are whatever the caller left (the results are never read): integer products cannot trap and
// the FMA loops start from zeroed registers, so no denormals slow them. Go's assembler writes
// VPDPBUSD only as EVEX; the VEX form (AVX-VNNI) is written out as in
// quant/packed_avxvnni_amd64.s.

// VPDPBUSD_VEX(d, u, s): Yd += unsigned bytes of Yu times signed bytes of Ys (registers 0-15).
#define VPDPBUSD_VEX(d, u, s) \
	BYTE $0xC4;                                           \
	BYTE $(0x42 | ((1-((d)>>3))<<7) | ((1-((s)>>3))<<5)); \
	BYTE $(((15-(u))<<3) | 0x05);                         \
	BYTE $0x50;                                           \
	BYTE $(0xC0 | (((d)&7)<<3) | ((s)&7))

#define Z12(OP, a, b) \
	OP a, b, Z0; OP a, b, Z1; OP a, b, Z2; OP a, b, Z3;  \
	OP a, b, Z4; OP a, b, Z5; OP a, b, Z6; OP a, b, Z7;  \
	OP a, b, Z8; OP a, b, Z9; OP a, b, Z10; OP a, b, Z11

#define Y12(OP, a, b) \
	OP a, b, Y0; OP a, b, Y1; OP a, b, Y2; OP a, b, Y3;  \
	OP a, b, Y4; OP a, b, Y5; OP a, b, Y6; OP a, b, Y7;  \
	OP a, b, Y8; OP a, b, Y9; OP a, b, Y10; OP a, b, Y11

#define VEX12 \
	VPDPBUSD_VEX(0, 14, 15); VPDPBUSD_VEX(1, 14, 15); VPDPBUSD_VEX(2, 14, 15);    \
	VPDPBUSD_VEX(3, 14, 15); VPDPBUSD_VEX(4, 14, 15); VPDPBUSD_VEX(5, 14, 15);    \
	VPDPBUSD_VEX(6, 14, 15); VPDPBUSD_VEX(7, 14, 15); VPDPBUSD_VEX(8, 14, 15);    \
	VPDPBUSD_VEX(9, 14, 15); VPDPBUSD_VEX(10, 14, 15); VPDPBUSD_VEX(11, 14, 15)

// AVX2's int8 product: unsigned Y14 times signed Y15 into int16 pairs, pairs summed into dwords
// by VPMADDWD with int16 ones (Y13), then added: the three instructions of the AVX2 kernels.
#define A2(acc, t) \
	VPMADDUBSW Y15, Y14, t; \
	VPMADDWD   Y13, t, t;   \
	VPADDD     t, acc, acc

#define A2X6 \
	A2(Y0, Y6); A2(Y1, Y7); A2(Y2, Y8); A2(Y3, Y9); A2(Y4, Y10); A2(Y5, Y11)

// A2S is A2 with the activations first taking the weights' signs (VPSIGNB), the sequence of the
// AVX2 Q8_0 panel kernel, whose weights are signed: the sign costs a vector slot per product.
#define A2S(acc, t) \
	VPSIGNB Y14, Y15, t; \
	VPMADDUBSW t, Y14, t; \
	VPMADDWD   Y13, t, t; \
	VPADDD     t, acc, acc

#define A2SX6 \
	A2S(Y0, Y6); A2S(Y1, Y7); A2S(Y2, Y8); A2S(Y3, Y9); A2S(Y4, Y10); A2S(Y5, Y11)

// A2PROLOGUE loads the iteration count and zeroes the operands; Y13 = int16 ones.
#define A2PROLOGUE \
	MOVQ         n+0(FP), CX;  \
	VPXOR        Y14, Y14, Y14; \
	VPXOR        Y15, Y15, Y15; \
	MOVL         $0x00010001, AX; \
	VMOVD        AX, X13;      \
	VPBROADCASTD X13, Y13

// ZEROZ12, ZEROY12: Z0-Z11 or Y0-Y11 zeroed.
#define ZEROZ12 \
	VXORPS Z0, Z0, Z0; VXORPS Z1, Z1, Z1; VXORPS Z2, Z2, Z2; VXORPS Z3, Z3, Z3;         \
	VXORPS Z4, Z4, Z4; VXORPS Z5, Z5, Z5; VXORPS Z6, Z6, Z6; VXORPS Z7, Z7, Z7;         \
	VXORPS Z8, Z8, Z8; VXORPS Z9, Z9, Z9; VXORPS Z10, Z10, Z10; VXORPS Z11, Z11, Z11

#define ZEROY12 \
	VXORPS Y0, Y0, Y0; VXORPS Y1, Y1, Y1; VXORPS Y2, Y2, Y2; VXORPS Y3, Y3, Y3;         \
	VXORPS Y4, Y4, Y4; VXORPS Y5, Y5, Y5; VXORPS Y6, Y6, Y6; VXORPS Y7, Y7, Y7;         \
	VXORPS Y8, Y8, Y8; VXORPS Y9, Y9, Y9; VXORPS Y10, Y10, Y10; VXORPS Y11, Y11, Y11

// PEAK(loop, half): the loop of n (CX) iterations of half twice, then the return.
#define PEAK(loop, half) \
loop:                     \
	half;                 \
	half;                 \
	DECQ CX;              \
	JNZ  loop;            \
	VZEROUPPER;           \
	RET

// func peakVNNI512(n int)
TEXT ·peakVNNI512(SB), NOSPLIT, $0-8
	MOVQ n+0(FP), CX
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	PEAK(vnni512, Z12(VPDPBUSD, Z31, Z30))

// func peakVNNI256(n int)
TEXT ·peakVNNI256(SB), NOSPLIT, $0-8
	MOVQ  n+0(FP), CX
	VPXOR Y14, Y14, Y14
	VPXOR Y15, Y15, Y15
	PEAK(vnni256, Y12(VPDPBUSD, Y15, Y14))

// func peakAVXVNNI(n int)
TEXT ·peakAVXVNNI(SB), NOSPLIT, $0-8
	MOVQ  n+0(FP), CX
	VPXOR Y14, Y14, Y14
	VPXOR Y15, Y15, Y15
	PEAK(avxvnni, VEX12)

// func peakAVX2Int8(n int)
TEXT ·peakAVX2Int8(SB), NOSPLIT, $0-8
	A2PROLOGUE
	PEAK(avx2int8, A2X6)

// func peakAVX2Int8Signed(n int)
TEXT ·peakAVX2Int8Signed(SB), NOSPLIT, $0-8
	A2PROLOGUE
	PEAK(avx2int8s, A2SX6)

// func peakFMA512(n int)
TEXT ·peakFMA512(SB), NOSPLIT, $0-8
	MOVQ   n+0(FP), CX
	ZEROZ12
	VXORPS Z30, Z30, Z30
	VXORPS Z31, Z31, Z31
	PEAK(fma512, Z12(VFMADD231PS, Z31, Z30))

// func peakFMA256(n int)
TEXT ·peakFMA256(SB), NOSPLIT, $0-8
	MOVQ   n+0(FP), CX
	ZEROY12
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15
	PEAK(fma256, Y12(VFMADD231PS, Y15, Y14))
