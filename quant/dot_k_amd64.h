// Macros shared by the AVX2 K-quant row kernels (dot_k_amd64.s: Q4_K, Q5_K, Q6_K; dot_k23_amd64.s:
// Q2_K, Q3_K, IQ4_XS): the arguments, the loops over the column counts, the prefetch and advance,
// the column product, the min folding and the stores.

#include "simd_amd64.h"

// Activation column addresses (add a constant offset in front).
#define C0 (SI)
#define C1 (SI)(R8*1)
#define C2 (SI)(R8*2)
#define C3 (SI)(R9*1)

// KARGS loads the arguments shared by all kernels.
#define KARGS \
	MOVQ nb+0(FP), CX; \
	MOVQ w+8(FP), DI; \
	MOVQ x+16(FP), SI; \
	MOVQ xStride+24(FP), R8; \
	LEAQ (R8)(R8*2), R9; \
	CLEAR4(VPXOR, Y0, Y1, Y2, Y3)

// KDISPATCH jumps to the loop for nx = 1, 2, 3 or 4 (the Go side guarantees 1 <= nx <= 4).
#define KDISPATCH(l1, l2, l3, l4) \
	MOVQ nx+32(FP), AX; \
	CMPQ AX, $2; \
	JB l1; \
	JEQ l2; \
	CMPQ AX, $4; \
	JB l3; \
	JMP l4

#define KNONE

// WDUP8 runs ROW(j, v) for j = 0..7 with v the VPSHUFB indices that put int16 j (bytes 2j,
// 2j+1) of a 128-bit lane into every word of 8 bytes: the rows of the tables that broadcast a
// scale (q6kshuf in dot_k_amd64.s, k3sc and kxsc in dot_k23_amd64.s).
#define WDUP8(ROW) \
	ROW(0, 0x0100010001000100); \
	ROW(1, 0x0302030203020302); \
	ROW(2, 0x0504050405040504); \
	ROW(3, 0x0706070607060706); \
	ROW(4, 0x0908090809080908); \
	ROW(5, 0x0b0a0b0a0b0a0b0a); \
	ROW(6, 0x0d0c0d0c0d0c0d0c); \
	ROW(7, 0x0f0e0f0e0f0e0f0e)

#define ZERO1 VPXOR Y4, Y4, Y4
#define ZERO2 ZERO1; VPXOR Y5, Y5, Y5
#define ZERO3 ZERO2; VPXOR Y6, Y6, Y6
#define ZERO4 ZERO3; VPXOR Y7, Y7, Y7

// KSTORE reduces Y0..Y3 to one float each and stores the first nx of them to out.
#define KSTORE(ret) \
	VEXTRACTF128 $1, Y0, X8; \
	VADDPS X8, X0, X0; \
	VEXTRACTF128 $1, Y1, X8; \
	VADDPS X8, X1, X1; \
	VEXTRACTF128 $1, Y2, X8; \
	VADDPS X8, X2, X2; \
	VEXTRACTF128 $1, Y3, X8; \
	VADDPS X8, X3, X3; \
	VHADDPS X1, X0, X0; \
	VHADDPS X3, X2, X2; \
	VHADDPS X2, X0, X0; \
	MOVQ out+40(FP), DI; \
	MOVQ nx+32(FP), DX; \
	VMOVSS X0, (DI); \
	CMPQ DX, $2; \
	JB ret; \
	VEXTRACTPS $1, X0, 4(DI); \
	JEQ ret; \
	VEXTRACTPS $2, X0, 8(DI); \
	CMPQ DX, $4; \
	JB ret; \
	VEXTRACTPS $3, X0, 12(DI)

// KPF is how far ahead of the current block the weights are prefetched (3 or 4 cache lines per
// block; prefetches past the end of w are harmless). Streaming a large matrix one row at a time
// (as decode does) the hardware prefetcher alone reached 5-6 GB/s on one core of the dev box;
// with these prefetches 8-10.7 GB/s, against 12 GB/s for a bare read loop (BenchmarkDotKStream).
#define KPF 4096

// KNEXT prefetches and advances to the next super-block and loops back to l while blocks remain.
#define KNEXT(wbytes, l) \
	PREFETCHT0 (KPF)(DI); \
	PREFETCHT0 (KPF+64)(DI); \
	PREFETCHT0 (KPF+128)(DI); \
	ADDQ $wbytes, DI; \
	ADDQ $292, SI; \
	DECQ CX; \
	JNZ l

// KLOOPS is a kernel's body after its arguments and constants: the dispatch on nx, then for n =
// 1..4 columns the loop at ln running Bn (one super-block of wbytes for n columns) and KNEXT,
// then the stores and the return. l1-l4, done and ret are its labels.
#define KLOOPS(B1, B2, B3, B4, wbytes, l1, l2, l3, l4, done, ret) \
	KDISPATCH(l1, l2, l3, l4); \
l1: \
	B1; \
	KNEXT(wbytes, l1); \
	JMP done; \
l2: \
	B2; \
	KNEXT(wbytes, l2); \
	JMP done; \
l3: \
	B3; \
	KNEXT(wbytes, l3); \
	JMP done; \
l4: \
	B4; \
	KNEXT(wbytes, l4); \
done: \
	KSTORE(ret); \
ret: \
	VZEROUPPER; \
	RET

// KDOT adds the 32 unsigned levels in Y10 times the quants at offset off of col, scaled by the
// int16s in Y11, to sumi.
#define KDOT(off, col, sumi) \
	VPMADDUBSW off col, Y10, Y12; \
	VPMADDWD Y11, Y12, Y12; \
	VPADDD Y12, sumi, sumi

// KMIN folds one column's block sums into acc: acc += dx·(d·sumi − dmin·Σ m·bsums), with d in
// Y9, dmin in Y10 and the mins as int16 in Y8, each paired with a bsum (Q4_K, Q5_K, Q2_K).
#define KMIN(col, sumi, acc) \
	VPMADDWD 260 col, Y8, Y12; \
	VCVTDQ2PS sumi, sumi; \
	VCVTDQ2PS Y12, Y12; \
	VMULPS sumi, Y9, sumi; \
	VFNMADD231PS Y12, Y10, sumi; \
	VBROADCASTSS 0 col, Y11; \
	VFMADD231PS sumi, Y11, acc
