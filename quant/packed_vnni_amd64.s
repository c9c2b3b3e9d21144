#include "textflag.h"

// AVX-512 VNNI kernels for packed Q8_0 and Q4_0 weights (panel layout in packed.go; the AVX2
// versions, whose structure these follow, are in packed_amd64.s): 8 rows times nx (1..4) columns
// of Q8_0 activations. VPDPBUSD multiplies 4 unsigned bytes by 4 signed bytes and adds the four
// products to a dword, so one instruction per chunk and column replaces AVX2's VPSIGNB,
// VPMADDUBSW, VPMADDWD and VPADDD; the column's 4 activation bytes come straight from memory as an
// embedded broadcast. The weights must be the unsigned operand:
//
//	Q8_0: u = w+128 (w XOR 0x80), so Σ u·x = Σ w·x + 128·Σx;
//	Q4_0: u = the raw nibble q (the weight is q-8), so Σ u·x = Σ (q-8)·x + 8·Σx.
//
// sums[4b+j] holds the correction (128·Σx or 8·Σx of block b of column j, see vnniSums), which
// is subtracted once per block and column. The result is the exact integer Σ w·x for any
// activation quants (no intermediate saturates: |u·x| <= 255·128, four of them fit a dword), so
// for the [-127, 127] quants QuantizeAct writes it equals the AVX2 kernels' sum, and the float part
// below is the AVX2 kernels' instruction for instruction: the results are bit-identical.
//
// Only 256-bit registers (AVX512VL): on Zen 4 a 512-bit VPDPBUSD costs two 256-bit ones, and the
// 8-row layout gives one broadcast per column and 32-byte chunk. Registers as in packed_amd64.s:
// CX blocks left; SI quants; BX scales; DI, R10, R12, R13 columns 0-3 (R8 apart); R11 nx; DX
// out; R9 sums; Y0-Y1 weights; Y3 scratch; Y5 the 0x80 (Q8_0) or 0x0f (Q4_0) bytes; Y7 the
// block's row scales; Y8-Y11 integer sums of columns 0-3; Y12-Y15 their results.

#define VP_PROLOGUE(qshift, mask) \
	MOVQ         nb+0(FP), CX;       \
	MOVQ         w+8(FP), SI;        \
	MOVQ         x+16(FP), DI;       \
	MOVQ         xStride+24(FP), R8; \
	MOVQ         nx+32(FP), R11;     \
	MOVQ         out+40(FP), DX;     \
	MOVQ         sums+56(FP), R9;    \
	MOVQ         CX, BX;             \
	SHLQ         $qshift, BX;        \
	ADDQ         SI, BX;             \
	LEAQ         (DI)(R8*1), R10;    \
	LEAQ         (DI)(R8*2), R12;    \
	LEAQ         (R10)(R8*2), R13;   \
	VXORPS       Y12, Y12, Y12;      \
	VXORPS       Y13, Y13, Y13;      \
	VXORPS       Y14, Y14, Y14;      \
	VXORPS       Y15, Y15, Y15;      \
	MOVL         $mask, AX;          \
	VMOVD        AX, X5;             \
	VPBROADCASTD X5, Y5

// VP_NEXT starts a block as PANEL_NEXT does: prefetches, the rows' scales, cleared sums.
#define VP_NEXT(lines) \
	PREFETCHT0 4096(SI);      \
	PREFETCHT0 4160(SI);      \
	lines;                    \
	PREFETCHT0 1024(BX);      \
	VCVTPH2PS  (BX), Y7;      \
	VPXOR      Y8, Y8, Y8;    \
	VPXOR      Y9, Y9, Y9;    \
	VPXOR      Y10, Y10, Y10; \
	VPXOR      Y11, Y11, Y11; \
	VPXORD     Y16, Y16, Y16; \
	VPXORD     Y17, Y17, Y17; \
	VPXORD     Y18, Y18, Y18; \
	VPXORD     Y19, Y19, Y19

#define V8_LINES \
	PREFETCHT0 4224(SI); \
	PREFETCHT0 4288(SI)

#define V4_LINES

#define VP_ADVANCE(qb) \
	ADDQ $qb, SI;  \
	ADDQ $16, BX;  \
	ADDQ $16, R9;  \
	ADDQ $34, DI;  \
	ADDQ $34, R10; \
	ADDQ $34, R12; \
	ADDQ $34, R13; \
	DECQ CX

// V8W(c) loads Q8_0 chunk c as unsigned w+128.
#define V8W(c) VPXOR 32*c(SI), Y5, Y0

// V8X adds chunk c times column P's 4 activations (broadcast) to acc.
#define V8X(c, P, acc) VPDPBUSD.BCST 2+4*c(P), Y0, acc

// V4W(c) decodes Q4_0 chunk c: Y0 = low nibbles (elements 4c..), Y1 = high nibbles (16+4c..).
#define V4W(c) \
	VMOVDQU 32*c(SI), Y0; \
	VPSRLW  $4, Y0, Y1;   \
	VPAND   Y5, Y0, Y0;   \
	VPAND   Y5, Y1, Y1

#define V4X(c, P, acc, acc2) \
	VPDPBUSD.BCST 2+4*c(P), Y0, acc; \
	VPDPBUSD.BCST 18+4*c(P), Y1, acc2

// VSCALE subtracts the correction at S from the block's sums in acc, converts them and
// accumulates them into facc times the row scales (Y7) times column P's scale (as PSCALE).
#define VSCALE(P, S, acc, acc2, facc) \
	VPADDD       acc2, acc, acc; \
	VPSUBD.BCST  S, acc, acc; \
	VCVTDQ2PS    acc, acc;    \
	VPBROADCASTW (P), X3;     \
	VCVTPH2PS    X3, Y3;      \
	VMULPS       Y7, Y3, Y3;  \
	VFMADD231PS  Y3, acc, facc

#define VS1 VSCALE(DI, 0(R9), Y8, Y16, Y12)
#define VS2 VS1; VSCALE(R10, 4(R9), Y9, Y17, Y13)
#define VS3 VS2; VSCALE(R12, 8(R9), Y10, Y18, Y14)
#define VS4 VS3; VSCALE(R13, 12(R9), Y11, Y19, Y15)

// Column sets: chunk c for the first n columns. Two sums per column (Y8-Y11 and Y16-Y19: even and
// odd Q8_0 chunks, low and high Q4_0 nibbles) halve the chains of dependent VPDPBUSDs.
#define V8C1(c, a0, a1, a2, a3) V8W(c); V8X(c, DI, a0)
#define V8C2(c, a0, a1, a2, a3) V8C1(c, a0, a1, a2, a3); V8X(c, R10, a1)
#define V8C3(c, a0, a1, a2, a3) V8C2(c, a0, a1, a2, a3); V8X(c, R12, a2)
#define V8C4(c, a0, a1, a2, a3) V8C3(c, a0, a1, a2, a3); V8X(c, R13, a3)

#define V8E(C, c) C(c, Y8, Y9, Y10, Y11)
#define V8O(C, c) C(c, Y16, Y17, Y18, Y19)
#define V8BLOCK(C) V8E(C, 0); V8O(C, 1); V8E(C, 2); V8O(C, 3); V8E(C, 4); V8O(C, 5); V8E(C, 6); V8O(C, 7)

#define V4C1(c) V4W(c); V4X(c, DI, Y8, Y16)
#define V4C2(c) V4C1(c); V4X(c, R10, Y9, Y17)
#define V4C3(c) V4C2(c); V4X(c, R12, Y10, Y18)
#define V4C4(c) V4C3(c); V4X(c, R13, Y11, Y19)

#define V4BLOCK(C) C(0); C(1); C(2); C(3)

// VP_STORE stores the nx (R11) columns' results from Y12-Y15 at DX, outStride floats apart.
#define VP_STORE(done) \
	MOVQ    outStride+48(FP), R9; \
	VMOVUPS Y12, (DX);            \
	CMPQ    R11, $2;              \
	JLT     done;                 \
	VMOVUPS Y13, (DX)(R9*4);      \
	CMPQ    R11, $3;              \
	JLT     done;                 \
	VMOVUPS Y14, (DX)(R9*8);      \
	CMPQ    R11, $4;              \
	JLT     done;                 \
	LEAQ    (R9)(R9*2), R9;       \
	VMOVUPS Y15, (DX)(R9*4)

// func q8PanelVNNI(nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// sums[4b+j] = 128·Σ of the quants of block b of column j.
TEXT ·q8PanelVNNI(SB), NOSPLIT, $0-64
	VP_PROLOGUE(8, 0x80808080)
	CMPQ R11, $2
	JLT  v8n1
	JEQ  v8n2
	CMPQ R11, $3
	JEQ  v8n3

v8n4:
	VP_NEXT(V8_LINES)
	V8BLOCK(V8C4)
	VS4
	VP_ADVANCE(256)
	JNZ v8n4
	JMP v8done

v8n3:
	VP_NEXT(V8_LINES)
	V8BLOCK(V8C3)
	VS3
	VP_ADVANCE(256)
	JNZ v8n3
	JMP v8done

v8n2:
	VP_NEXT(V8_LINES)
	V8BLOCK(V8C2)
	VS2
	VP_ADVANCE(256)
	JNZ v8n2
	JMP v8done

v8n1:
	VP_NEXT(V8_LINES)
	V8BLOCK(V8C1)
	VS1
	VP_ADVANCE(256)
	JNZ v8n1

v8done:
	VP_STORE(v8ret)

v8ret:
	VZEROUPPER
	RET

// func q4PanelVNNI(nb int, w, x *byte, xStride, nx int, out *float32, outStride int, sums *int32)
// sums[4b+j] = 8·Σ of the quants of block b of column j (q4SumsAVX2).
TEXT ·q4PanelVNNI(SB), NOSPLIT, $0-64
	VP_PROLOGUE(7, 0x0f0f0f0f)
	CMPQ R11, $2
	JLT  v4n1
	JEQ  v4n2
	CMPQ R11, $3
	JEQ  v4n3

v4n4:
	VP_NEXT(V4_LINES)
	V4BLOCK(V4C4)
	VS4
	VP_ADVANCE(128)
	JNZ v4n4
	JMP v4done

v4n3:
	VP_NEXT(V4_LINES)
	V4BLOCK(V4C3)
	VS3
	VP_ADVANCE(128)
	JNZ v4n3
	JMP v4done

v4n2:
	VP_NEXT(V4_LINES)
	V4BLOCK(V4C2)
	VS2
	VP_ADVANCE(128)
	JNZ v4n2
	JMP v4done

v4n1:
	VP_NEXT(V4_LINES)
	V4BLOCK(V4C1)
	VS1
	VP_ADVANCE(128)
	JNZ v4n1

v4done:
	VP_STORE(v4ret)

v4ret:
	VZEROUPPER
	RET
