// Macros shared by the AVX2 K-quant row kernels (dot_k_amd64.s: Q4_K, Q5_K, Q6_K; dot_k23_amd64.s:
// Q2_K, Q3_K, IQ4_XS): the arguments, the dispatch on the column count and the stores.

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
	VPXOR Y0, Y0, Y0; \
	VPXOR Y1, Y1, Y1; \
	VPXOR Y2, Y2, Y2; \
	VPXOR Y3, Y3, Y3

// KDISPATCH jumps to the loop for nx = 1, 2, 3 or 4 (the Go side guarantees 1 <= nx <= 4).
#define KDISPATCH(l1, l2, l3, l4) \
	MOVQ nx+32(FP), AX; \
	CMPQ AX, $2; \
	JB l1; \
	JEQ l2; \
	CMPQ AX, $4; \
	JB l3; \
	JMP l4

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
