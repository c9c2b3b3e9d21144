// Macros shared by the AVX2 row kernels of the 32-element block types against Q8_0 activations
// (dot_q8_amd64.s: Q4_0, Q8_0; dot_q32_amd64.s: Q5_0, Q5_1, Q4_1, IQ4_NL): the frame, the products
// and the sums, which are the same instructions in both. The tables ·q4shift, ·mask0f and ·ones16
// are defined in dot_q8_amd64.s.

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
