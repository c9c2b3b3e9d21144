// AVX2 dot kernels for the K-quants (Q4_K, Q5_K, Q6_K weights) against Q8_K activations. See
// dot_k_amd64.go for the Go side and dot_k.go for the pure-Go twins these must agree with.
//
// Each kernel runs over nb super-blocks of one weight row and nx (1..4) activation columns at
// x, x+xStride, x+2*xStride, x+3*xStride. A weight super-block is decoded once (levels to bytes,
// scales to int16) and then applied to every column: VPMADDUBSW multiplies the unsigned levels
// with the signed Q8_K quants into int16 pair sums, VPMADDWD multiplies those with the broadcast
// sub-block scale into int32, and each column keeps an int32 sum (Y4..Y7) per super-block that is
// converted and folded into a float32 accumulator (Y0..Y3) with d·dx. The mins (Q4_K, Q5_K) and
// Q6_K's -32 offset come from the Q8_K bsums (sums of 16 quants) with one VPMADDWD per column.
// The accumulators are reduced identically whatever nx is, so column j of an nx-column call
// equals a one-column call bit for bit.
//
// Layouts (ggml-common.h): Q4_K d f16, dmin f16, scales[12], qs[128] (144 bytes); Q5_K adds
// qh[32] before qs (176 bytes); Q6_K ql[128], qh[64], scales int8[16], d f16 (210 bytes);
// Q8_K d f32, qs int8[256], bsums int16[16] (292 bytes, quants at +4, bsums at +260).
//
// Registers: DI weight block, SI column-0 activation block, R8 xStride, R9 3*xStride, CX blocks
// left; Y15 = 0x0f bytes.
// Integer overflow: Q4_K/Q5_K levels <= 31 give VPMADDUBSW pair sums |.| <= 2*31*128 and Q6_K
// levels <= 63 give <= 2*63*128 = 16128, all inside int16 (no saturation); the int32 sums are
// far from overflow.

#include "textflag.h"
#include "dot_k_amd64.h"

// KSCALES unpacks the 12-byte 6-bit scales/mins of a Q4_K/Q5_K block (bytes b0..b11) with
// 64-bit masks (R11 = 0x3f.., R12 = 0x30.., R13 = 0x0f..) into Y14 = bytes [s0..s3 m0..m3 s4..s7
// m4..m7] in both lanes, from which VPSHUFB picks zero-extended int16 scales and mins:
// s_j, m_j = b_j&63, b_{j+4}&63 (j < 4) and b_{j+4}&15 | b_{j-4}>>6<<4, b_{j+4}>>4 | b_j>>6<<4.
#define KSCALES \
	MOVQ 4(DI), AX; \
	MOVL 12(DI), BX; \
	MOVQ AX, DX; \
	ANDQ R11, DX; \
	SHRQ $2, AX; \
	ANDQ R12, AX; \
	MOVQ BX, R10; \
	SHLQ $28, R10; \
	ORQ BX, R10; \
	ANDQ R13, R10; \
	ORQ R10, AX; \
	VMOVQ DX, X14; \
	VPINSRQ $1, AX, X14, X14; \
	VPERMQ $0x44, Y14, Y14

// KMASKS loads the constants KSCALES uses.
#define KMASKS \
	MOVQ $0x3f3f3f3f3f3f3f3f, R11; \
	MOVQ $0x3030303030303030, R12; \
	MOVQ $0x0f0f0f0f0f0f0f0f, R13

// KSCALE_BCAST broadcasts the int16 scales of sub-blocks 2g and 2g+1 to Y10 and Y11.
#define KSCALE_BCAST(g) \
	VPSHUFB ksc<>+(64*g)(SB), Y14, Y10; \
	VPSHUFB ksc<>+(64*g+32)(SB), Y14, Y11

// KCOL adds group g's (64 elements: levels Y8 for sub-block 2g, Y9 for 2g+1) scaled dot with
// column col to the int32 sums in sumi.
#define KCOL(g, col, sumi) \
	VPMADDUBSW (4+64*g)col, Y8, Y12; \
	VPMADDWD Y10, Y12, Y12; \
	VPADDD Y12, sumi, sumi; \
	VPMADDUBSW (36+64*g)col, Y9, Y12; \
	VPMADDWD Y11, Y12, Y12; \
	VPADDD Y12, sumi, sumi

// Q4K_LOAD decodes group g of a Q4_K block: low nibbles to Y8, high nibbles to Y9 (Y15 = 0x0f).
#define Q4K_LOAD(g) \
	VMOVDQU (16+32*g)(DI), Y8; \
	VPSRLW $4, Y8, Y9; \
	VPAND Y15, Y8, Y8; \
	VPAND Y15, Y9, Y9; \
	KSCALE_BCAST(g)

// Q5K_LOAD is Q4K_LOAD for Q5_K, adding bit 2g (to Y8) and 2g+1 (to Y9) of qh as bit 4 of the
// level. Y13 holds qh shifted right by 2g (Y15 = 0x0f); it is shifted on for g+1.
#define Q5K_LOAD(g) \
	VMOVDQU (48+32*g)(DI), Y8; \
	VPSRLW $4, Y8, Y9; \
	VPAND Y15, Y8, Y8; \
	VPAND Y15, Y9, Y9; \
	VPSLLW $4, Y13, Y12; \
	VPAND kbit4<>(SB), Y12, Y12; \
	VPOR Y12, Y8, Y8; \
	VPSLLW $3, Y13, Y12; \
	VPAND kbit4<>(SB), Y12, Y12; \
	VPOR Y12, Y9, Y9; \
	VPSRLW $2, Y13, Y13; \
	KSCALE_BCAST(g)

#define Q4K_G1(g) Q4K_LOAD(g); KCOL(g, C0, Y4)
#define Q4K_G2(g) Q4K_G1(g); KCOL(g, C1, Y5)
#define Q4K_G3(g) Q4K_G2(g); KCOL(g, C2, Y6)
#define Q4K_G4(g) Q4K_G3(g); KCOL(g, C3, Y7)
#define Q5K_G1(g) Q5K_LOAD(g); KCOL(g, C0, Y4)
#define Q5K_G2(g) Q5K_G1(g); KCOL(g, C1, Y5)
#define Q5K_G3(g) Q5K_G2(g); KCOL(g, C2, Y6)
#define Q5K_G4(g) Q5K_G3(g); KCOL(g, C3, Y7)

// KM_HDR prepares the end of a Q4_K/Q5_K block: Y9 = d, Y10 = dmin (from the f16 header), Y8 =
// the mins as int16, each twice (m0 m0 m1 m1 ...) to pair with the 16 bsums.
#define KM_HDR \
	MOVL (DI), AX; \
	VMOVD AX, X9; \
	VCVTPH2PS X9, X9; \
	VMOVSHDUP X9, X10; \
	VBROADCASTSS X9, Y9; \
	VBROADCASTSS X10, Y10; \
	VPSHUFB kmins<>(SB), Y14, Y8

#define KM_END1 KM_HDR; KMIN(C0, Y4, Y0)
#define KM_END2 KM_END1; KMIN(C1, Y5, Y1)
#define KM_END3 KM_END2; KMIN(C2, Y6, Y2)
#define KM_END4 KM_END3; KMIN(C3, Y7, Y3)

// K45BLOCK runs one Q4_K or Q5_K super-block: the scales, Z clearing the sums, PRE (Q5_K: qh to
// Y13), the four groups G(g) and the min folding END.
#define K45BLOCK(Z, PRE, G, END) \
	KSCALES; \
	Z; \
	PRE; \
	G(0); G(1); G(2); G(3); \
	END

#define Q5K_QH VMOVDQU 16(DI), Y13

// K45KERNEL is the body of the Q4_K and Q5_K kernels: PRE and Gn as in K45BLOCK, wbytes per
// super-block, labels as KLOOPS.
#define K45KERNEL(PRE, G1, G2, G3, G4, wbytes, l1, l2, l3, l4, done, ret) \
	KARGS; \
	KMASKS; \
	BCAST32(0x0f0f0f0f, X15, Y15); \
	KLOOPS(K45BLOCK(ZERO1, PRE, G1, KM_END1), K45BLOCK(ZERO2, PRE, G2, KM_END2), K45BLOCK(ZERO3, PRE, G3, KM_END3), K45BLOCK(ZERO4, PRE, G4, KM_END4), wbytes, l1, l2, l3, l4, done, ret)

// func dotQ4KAVX2(nb int, w *byte, x *byte, xStride int, nx int, out *float32)
TEXT ·dotQ4KAVX2(SB), NOSPLIT, $0-48
	K45KERNEL(KNONE, Q4K_G1, Q4K_G2, Q4K_G3, Q4K_G4, 144, q4k1, q4k2, q4k3, q4k4, q4kdone, q4kret)

// func dotQ5KAVX2(nb int, w *byte, x *byte, xStride int, nx int, out *float32)
TEXT ·dotQ5KAVX2(SB), NOSPLIT, $0-48
	K45KERNEL(Q5K_QH, Q5K_G1, Q5K_G2, Q5K_G3, Q5K_G4, 176, q5k1, q5k2, q5k3, q5k4, q5kdone, q5kret)

// Q6_K. Registers: Y8 qh (32 bytes of the current 128-element half), Y9 ql, Y10 levels (0..63),
// Y11 scales, Y12 temp, Y13 = 0x30, Y14 = the half's eight int8 scales as int16 in both lanes,
// Y15 = 0x0f.

// Q6K_HALF loads half h's qh and scales.
#define Q6K_HALF(h) \
	VMOVDQU (128+32*h)(DI), Y8; \
	VPMOVSXBW (192+8*h)(DI), X14; \
	VPERMQ $0x44, Y14, Y14

// Q6B0..Q6B3 put bits 2s, 2s+1 of each qh byte at bits 4-5 of Y12 for sub-block s.
#define Q6B0 VPSLLW $4, Y8, Y12; VPAND Y13, Y12, Y12
#define Q6B1 VPSLLW $2, Y8, Y12; VPAND Y13, Y12, Y12
#define Q6B2 VPAND Y13, Y8, Y12
#define Q6B3 VPSRLW $2, Y8, Y12; VPAND Y13, Y12, Y12

// Q6K_LOW / Q6K_HIGH decode sub-block s (32 elements) of a half into Y10 from the low/high
// nibbles of ql (loaded from qloff into Y9 by Q6K_LOW) and the qh bits from bits (a Q6Bs);
// Y11 gets the int16 scales of its two 16-element groups (low lane, high lane).
#define Q6K_LOW(qloff, bits, s) \
	VMOVDQU qloff(DI), Y9; \
	VPAND Y15, Y9, Y10; \
	bits; \
	VPOR Y12, Y10, Y10; \
	VPSHUFB q6kshuf<>+(32*s)(SB), Y14, Y11

#define Q6K_HIGH(bits, s) \
	VPSRLW $4, Y9, Y10; \
	VPAND Y15, Y10, Y10; \
	bits; \
	VPOR Y12, Y10, Y10; \
	VPSHUFB q6kshuf<>+(32*s)(SB), Y14, Y11

#define Q6C1(off) KDOT(off, C0, Y4)
#define Q6C2(off) Q6C1(off); KDOT(off, C1, Y5)
#define Q6C3(off) Q6C2(off); KDOT(off, C2, Y6)
#define Q6C4(off) Q6C3(off); KDOT(off, C3, Y7)

// Q6K_H runs half h (elements 128h..128h+127) for the columns handled by cols. Sub-block 0 is
// ql[0:32] low nibbles with qh bits 0-1, 1 is ql[32:64] low with bits 2-3, 2 is ql[0:32] high with
// bits 4-5, 3 is ql[32:64] high with bits 6-7.
#define Q6K_H(h, cols) \
	Q6K_HALF(h); \
	Q6K_LOW((64*h), Q6B0, 0); \
	cols((4+128*h)); \
	Q6K_HIGH(Q6B2, 2); \
	cols((68+128*h)); \
	Q6K_LOW((64*h+32), Q6B1, 1); \
	cols((36+128*h)); \
	Q6K_HIGH(Q6B3, 3); \
	cols((100+128*h))

// Q6_HDR sets Y9 = d and Y8 = 32 times the 16 scales as int16 (pairing with the 16 bsums).
#define Q6_HDR \
	MOVWLZX 208(DI), AX; \
	VMOVD AX, X9; \
	VCVTPH2PS X9, X9; \
	VBROADCASTSS X9, Y9; \
	VPMOVSXBW 192(DI), Y8; \
	VPSLLW $5, Y8, Y8

// Q6_END folds one column's block sum into acc: acc += d·dx·(sumi − Σ 32·sc·bsums).
#define Q6_END(col, sumi, acc) \
	VPMADDWD 260 col, Y8, Y12; \
	VPSUBD Y12, sumi, sumi; \
	VBROADCASTSS 0 col, Y11; \
	VMULPS Y11, Y9, Y11; \
	VCVTDQ2PS sumi, sumi; \
	VFMADD231PS sumi, Y11, acc

#define Q6_END1 Q6_HDR; Q6_END(C0, Y4, Y0)
#define Q6_END2 Q6_END1; Q6_END(C1, Y5, Y1)
#define Q6_END3 Q6_END2; Q6_END(C2, Y6, Y2)
#define Q6_END4 Q6_END3; Q6_END(C3, Y7, Y3)

// Q6K_BLOCK runs one super-block for the columns Z/C/END name; the fourth cache line of the
// 210-byte block is prefetched too.
#define Q6K_BLOCK(Z, C, END) \
	Z; \
	Q6K_H(0, C); Q6K_H(1, C); \
	END; \
	PREFETCHT0 (KPF+192)(DI)

// func dotQ6KAVX2(nb int, w *byte, x *byte, xStride int, nx int, out *float32)
TEXT ·dotQ6KAVX2(SB), NOSPLIT, $0-48
	KARGS
	BCAST32(0x0f0f0f0f, X15, Y15)
	BCAST32(0x30303030, X13, Y13)
	KLOOPS(Q6K_BLOCK(ZERO1, Q6C1, Q6_END1), Q6K_BLOCK(ZERO2, Q6C2, Q6_END2), Q6K_BLOCK(ZERO3, Q6C3, Q6_END3), Q6K_BLOCK(ZERO4, Q6C4, Q6_END4), 210, q6k1, q6k2, q6k3, q6k4, q6kdone, q6kret)

// q6kshuf picks, for sub-block s of a Q6_K half, int16 scale 2s into every word of the low lane
// and scale 2s+1 into every word of the high lane (VPSHUFB byte indices 4s,4s+1 / 4s+2,4s+3).
#define Q6KSHUF(j, v) DATA16(q6kshuf<>, 16*j, v)
WDUP8(Q6KSHUF)
GLOBL q6kshuf<>(SB), RODATA|NOPTR, $128

// ksc picks int16 scale j (byte j of Y14 for j < 4, byte j+4 otherwise; index 0x80 gives a zero
// high byte) into every word, for j = 0..7 at ksc+32j; kmins picks the mins twice each (m0 m0 m1
// m1 m2 m2 m3 m3 | m4 m4 ... m7 m7) to pair with the 16 bsums.
#define KSC(j, v) DATA32(ksc<>, 32*j, v)

KSC(0, 0x8000800080008000)
KSC(1, 0x8001800180018001)
KSC(2, 0x8002800280028002)
KSC(3, 0x8003800380038003)
KSC(4, 0x8008800880088008)
KSC(5, 0x8009800980098009)
KSC(6, 0x800a800a800a800a)
KSC(7, 0x800b800b800b800b)
GLOBL ksc<>(SB), RODATA|NOPTR, $256

TABLE32(kmins<>, 0x8005800580048004, 0x8007800780068006, 0x800d800d800c800c, 0x800f800f800e800e)

CONST32(kbit4<>, 0x1010101010101010)
