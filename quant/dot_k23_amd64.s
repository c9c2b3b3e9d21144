// AVX2 dot kernels for Q2_K, Q3_K and IQ4_XS weights against Q8_K activations. See
// dot_k23_amd64.go for the Go side and k23.go for the pure-Go twins these must agree with.
//
// Built like dot_k_amd64.s: each kernel runs over nb super-blocks of one weight row and nx (1..4)
// activation columns at x, x+xStride, x+2*xStride, x+3*xStride. A super-block is decoded once
// per 32 elements (levels to bytes, scales to broadcast int16) and applied to every column:
// VPMADDUBSW multiplies unsigned levels by the signed Q8_K quants into int16 pair sums, VPMADDWD
// multiplies those by the scales into int32, and each column keeps an int32 sum per super-block
// (Y4..Y7) that is converted and folded into a float32 accumulator (Y0..Y3) with d·dx. Column j
// of an nx-column call equals a one-column call bit for bit.
//
// Q2_K: levels 0..3, a 4-bit scale per 16 elements; the mins (dmin·m per 16 elements) come from
// the Q8_K bsums with one VPMADDWD per column.
// Q3_K: the level l in [-4, 3] enters as l+4 in [0, 7] (the two low bits from qs, bit 2 from
// hmask); the 4·Σ scale·x it adds is taken off with the bsums, as the Q6_K kernel does with
// its 32.
// IQ4_XS: table values in [-127, 113] are signed, so as in ggml the quants take the values'
// signs (VPSIGNB) and VPMADDUBSW multiplies |value| by ±x; one scale per 32 elements.
//
// Layouts (ggml-common.h): Q2_K scales[16] (scale low nibble, min high), qs[64], d, dmin f16
// (84 bytes); Q3_K hmask[32], qs[64], scales[12], d f16 (110 bytes); IQ4_XS d f16, scales_h
// uint16, scales_l[4], qs[128] (136 bytes); Q8_K d f32, qs int8[256], bsums int16[16] (292 bytes,
// quants at +4, bsums at +260). In Q2_K and Q3_K, element 128h + 32j + i takes bits 2j..2j+1 of
// qs[32h+i] (and Q3_K bit 4h+j of hmask[i]), so each shift of a 32-byte half gives 32 consecutive
// elements: two 16-element scale groups, one per 128-bit lane.
//
// Registers: DI weight block, SI column-0 activation block, R8 xStride, R9 3*xStride, CX blocks
// left. Integer ranges: pair sums are at most 2·7·128 (Q2_K, Q3_K) or 2·127·128 = 32512
// (IQ4_XS, no saturation); the int32 sums are far from overflow.

#include "textflag.h"
#include "dot_k_amd64.h"

// The tables: ·mask0f, ·q4shift (dot_q8_amd64.s) and ·iq4nl (dot_q32_amd64.s) are shared with the
// Q8_0-activation kernels. k2sc+16j zero-extends byte j (Q2_K scale j) into every word; k3sc+16j
// and kxsc+32j broadcast int16 j within each lane (Q3_K, IQ4_XS scales); k23m20 subtracts 32.
DATA16(k2sc<>, 0, 0x8000800080008000)
DATA16(k2sc<>, 16, 0x8001800180018001)
DATA16(k2sc<>, 32, 0x8002800280028002)
DATA16(k2sc<>, 48, 0x8003800380038003)
DATA16(k2sc<>, 64, 0x8004800480048004)
DATA16(k2sc<>, 80, 0x8005800580058005)
DATA16(k2sc<>, 96, 0x8006800680068006)
DATA16(k2sc<>, 112, 0x8007800780078007)
DATA16(k2sc<>, 128, 0x8008800880088008)
DATA16(k2sc<>, 144, 0x8009800980098009)
DATA16(k2sc<>, 160, 0x800a800a800a800a)
DATA16(k2sc<>, 176, 0x800b800b800b800b)
DATA16(k2sc<>, 192, 0x800c800c800c800c)
DATA16(k2sc<>, 208, 0x800d800d800d800d)
DATA16(k2sc<>, 224, 0x800e800e800e800e)
DATA16(k2sc<>, 240, 0x800f800f800f800f)
GLOBL k2sc<>(SB), RODATA|NOPTR, $256

#define K3SC(j, v) DATA16(k3sc<>, 16*j, v)
WDUP8(K3SC)
GLOBL k3sc<>(SB), RODATA|NOPTR, $128

#define KXSC(j, v) DATA32(kxsc<>, 32*j, v)
WDUP8(KXSC)
GLOBL kxsc<>(SB), RODATA|NOPTR, $256

CONST32(k23m03<>, 0x0303030303030303)
CONST32(k23m04<>, 0x0404040404040404)

DATA16(k23m20<>, 0, 0x2020202020202020)
GLOBL k23m20<>(SB), RODATA|NOPTR, $16

// EACHn(m, a) expands m(a, col, sumi) for the first n columns.
#define EACH1(m, a) m(a, C0, Y4)
#define EACH2(m, a) EACH1(m, a); m(a, C1, Y5)
#define EACH3(m, a) EACH2(m, a); m(a, C2, Y6)
#define EACH4(m, a) EACH3(m, a); m(a, C3, Y7)

// KFOLD folds one column's block sum into acc: acc += dx·(d·sumi), d broadcast in Y9.
#define KFOLD(col, sumi, acc) \
	VCVTDQ2PS sumi, sumi; \
	VMULPS Y9, sumi, sumi; \
	VBROADCASTSS 0 col, Y11; \
	VFMADD231PS sumi, Y11, acc

#define KFOLD1 KFOLD(C0, Y4, Y0)
#define KFOLD2 KFOLD1; KFOLD(C1, Y5, Y1)
#define KFOLD3 KFOLD2; KFOLD(C2, Y6, Y2)
#define KFOLD4 KFOLD3; KFOLD(C3, Y7, Y3)

// KD16 broadcasts the f16 at off(DI) as a float32 to Y9.
#define KD16(off) \
	MOVWLZX off(DI), AX; \
	VMOVD AX, X9; \
	VCVTPH2PS X9, X9; \
	VBROADCASTSS X9, Y9

// ---- Q2_K ----

// Q2K_I handles elements 32i..32i+31 (i = 4h+j): levels = (qs half q >> 2j) & 3 into Y10, scales
// of groups 2i and 2i+1 (one per lane) into Y11 from the scale bytes in Y14, then every column.
#define Q2K_I(i, q, sh, each) \
	VPSRLW $sh, q, Y10; \
	VPAND k23m03<>(SB), Y10, Y10; \
	VPSHUFB k2sc<>+(32*i)(SB), Y14, Y11; \
	each(KDOT, (4+32*i))

#define Q2K_MIN1 KMIN(C0, Y4, Y0)
#define Q2K_MIN2 Q2K_MIN1; KMIN(C1, Y5, Y1)
#define Q2K_MIN3 Q2K_MIN2; KMIN(C2, Y6, Y2)
#define Q2K_MIN4 Q2K_MIN3; KMIN(C3, Y7, Y3)

// Q2K_BLOCK runs one super-block for the columns each/zero/mins name.
#define Q2K_BLOCK(each, zero, mins) \
	VBROADCASTI128 (DI), Y14; \
	VPAND ·mask0f(SB), Y14, Y14; \
	VMOVDQU 16(DI), Y8; \
	VMOVDQU 48(DI), Y9; \
	zero; \
	Q2K_I(0, Y8, 0, each); \
	Q2K_I(1, Y8, 2, each); \
	Q2K_I(2, Y8, 4, each); \
	Q2K_I(3, Y8, 6, each); \
	Q2K_I(4, Y9, 0, each); \
	Q2K_I(5, Y9, 2, each); \
	Q2K_I(6, Y9, 4, each); \
	Q2K_I(7, Y9, 6, each); \
	VMOVDQU (DI), X8; \
	VPSRLW $4, X8, X8; \
	VPAND ·mask0f(SB), X8, X8; \
	VPMOVZXBW X8, Y8; \
	MOVL 80(DI), AX; \
	VMOVD AX, X9; \
	VCVTPH2PS X9, X9; \
	VMOVSHDUP X9, X10; \
	VBROADCASTSS X9, Y9; \
	VBROADCASTSS X10, Y10; \
	mins

// func dotQ2KAVX2(nb int, w *byte, x *byte, xStride int, nx int, out *float32)
TEXT ·dotQ2KAVX2(SB), NOSPLIT, $0-48
	KARGS
	KLOOPS(Q2K_BLOCK(EACH1, ZERO1, Q2K_MIN1), Q2K_BLOCK(EACH2, ZERO2, Q2K_MIN2), Q2K_BLOCK(EACH3, ZERO3, Q2K_MIN3), Q2K_BLOCK(EACH4, ZERO4, Q2K_MIN4), 84, q2k1, q2k2, q2k3, q2k4, q2kdone, q2kret)

// ---- Q3_K ----

// Q3K_SCALES unpacks the 16 6-bit scales (bytes b0..b11 at 96(DI)) into Y14 = the int16s
// s_g - 32 for g = 0..15 in order (s_g: low 4 bits from b_{g%8} nibble g/8, top 2 bits from
// b_{8+g%4} bits 2(g/4)..), using R11 = 0x0f.. and R12 = 0x03030303.
#define Q3K_SCALES \
	MOVQ 96(DI), AX; \
	MOVL 104(DI), BX; \
	MOVQ AX, DX; \
	ANDQ R11, DX; \
	SHRQ $4, AX; \
	ANDQ R11, AX; \
	MOVL BX, R10; \
	ANDL R12, R10; \
	MOVL BX, R13; \
	SHRL $2, R13; \
	ANDL R12, R13; \
	SHLQ $32, R13; \
	ORQ R13, R10; \
	SHLQ $4, R10; \
	ORQ R10, DX; \
	MOVL BX, R10; \
	SHRL $4, R10; \
	ANDL R12, R10; \
	SHRL $6, BX; \
	ANDL R12, BX; \
	SHLQ $32, BX; \
	ORQ BX, R10; \
	SHLQ $4, R10; \
	ORQ R10, AX; \
	VMOVQ DX, X14; \
	VPINSRQ $1, AX, X14, X14; \
	VPSUBB k23m20<>(SB), X14, X14; \
	VPMOVSXBW X14, Y14

// Q3K_OFF starts one column's block sum at -4·Σ_g scale_g·bsums_g (the levels enter as l+4).
#define Q3K_OFF(unused, col, sumi) \
	VPMADDWD 260 col, Y14, sumi; \
	VPSLLD $2, sumi, sumi; \
	VPSUBD sumi, Y13, sumi

// Q3K_I handles elements 32i..32i+31 (i = 4h+j): levels l+4 = ((qs half q >> 2j) & 3) |
// (bit i of hmask (Y13) moved to bit 2) into Y10, the int16 scales of groups 2i and 2i+1 into
// Y11 from src (Y14 for i < 4, Y15 after), then every column. hop/hsh move bit i to bit 2.
#define Q3K_I(i, q, sh, hop, hsh, src, each) \
	VPSRLW $sh, q, Y10; \
	VPAND k23m03<>(SB), Y10, Y10; \
	hop $hsh, Y13, Y12; \
	VPAND k23m04<>(SB), Y12, Y12; \
	VPOR Y12, Y10, Y10; \
	VPSHUFB k3sc<>+(32*(i%4))(SB), src, Y11; \
	each(KDOT, (4+32*i))

// Q3K_BLOCK runs one super-block for the columns each/zero/fold name.
#define Q3K_BLOCK(each, fold) \
	Q3K_SCALES; \
	VPXOR Y13, Y13, Y13; \
	each(Q3K_OFF, 0); \
	VPERMQ $0xee, Y14, Y15; \
	VPERMQ $0x44, Y14, Y14; \
	VMOVDQU (DI), Y13; \
	VMOVDQU 32(DI), Y8; \
	VMOVDQU 64(DI), Y9; \
	Q3K_I(0, Y8, 0, VPSLLW, 2, Y14, each); \
	Q3K_I(1, Y8, 2, VPSLLW, 1, Y14, each); \
	Q3K_I(2, Y8, 4, VPSRLW, 0, Y14, each); \
	Q3K_I(3, Y8, 6, VPSRLW, 1, Y14, each); \
	Q3K_I(4, Y9, 0, VPSRLW, 2, Y15, each); \
	Q3K_I(5, Y9, 2, VPSRLW, 3, Y15, each); \
	Q3K_I(6, Y9, 4, VPSRLW, 4, Y15, each); \
	Q3K_I(7, Y9, 6, VPSRLW, 5, Y15, each); \
	KD16(108); \
	fold

// func dotQ3KAVX2(nb int, w *byte, x *byte, xStride int, nx int, out *float32)
TEXT ·dotQ3KAVX2(SB), NOSPLIT, $0-48
	KARGS
	MOVQ $0x0f0f0f0f0f0f0f0f, R11
	MOVL $0x03030303, R12
	KLOOPS(Q3K_BLOCK(EACH1, KFOLD1), Q3K_BLOCK(EACH2, KFOLD2), Q3K_BLOCK(EACH3, KFOLD3), Q3K_BLOCK(EACH4, KFOLD4), 110, q3k1, q3k2, q3k3, q3k4, q3kdone, q3kret)

// ---- IQ4_XS ----

// IQ4X_SCALES unpacks the eight 6-bit scales (low nibbles scales_l at 4(DI), top bits scales_h at
// 2(DI)) with BMI2 PDEP into Y14 = the int16s ls_ib - 32, ib = 0..7, in both lanes (R11 =
// 0x0f.., R12 = 0x30..).
#define IQ4X_SCALES \
	MOVL 4(DI), AX; \
	PDEPQ R11, AX, AX; \
	MOVWLZX 2(DI), BX; \
	PDEPQ R12, BX, BX; \
	ORQ BX, AX; \
	VMOVQ AX, X14; \
	VPSUBB k23m20<>(SB), X14, X14; \
	VPMOVSXBW X14, X14; \
	VINSERTI128 $1, X14, Y14, Y14

// IQ4X_COL adds the signed values in Y8 (|values| in Y9) times the quants at offset off of col,
// scaled by the int16s in Y11, to sumi.
#define IQ4X_COL(off, col, sumi) \
	VMOVDQU off col, Y12; \
	VPSIGNB Y8, Y12, Y12; \
	VPMADDUBSW Y12, Y9, Y12; \
	VPMADDWD Y11, Y12, Y12; \
	VPADDD Y12, sumi, sumi

// IQ4X_I handles sub-block ib (elements 32ib..32ib+31): its 16 quant bytes to 32 table values
// (table in Y13, 0x0f bytes in Y15), its scale broadcast to Y11, then every column.
#define IQ4X_I(ib, each) \
	VBROADCASTI128 (8+16*ib)(DI), Y8; \
	VPSRLVQ ·q4shift(SB), Y8, Y8; \
	VPAND Y15, Y8, Y8; \
	VPSHUFB Y8, Y13, Y8; \
	VPABSB Y8, Y9; \
	VPSHUFB kxsc<>+(32*ib)(SB), Y14, Y11; \
	each(IQ4X_COL, (4+32*ib))

#define IQ4X_BLOCK(each, zero, fold) \
	IQ4X_SCALES; \
	zero; \
	IQ4X_I(0, each); \
	IQ4X_I(1, each); \
	IQ4X_I(2, each); \
	IQ4X_I(3, each); \
	IQ4X_I(4, each); \
	IQ4X_I(5, each); \
	IQ4X_I(6, each); \
	IQ4X_I(7, each); \
	KD16(0); \
	fold

// func dotIQ4XSAVX2(nb int, w *byte, x *byte, xStride int, nx int, out *float32)
TEXT ·dotIQ4XSAVX2(SB), NOSPLIT, $0-48
	KARGS
	MOVQ $0x0f0f0f0f0f0f0f0f, R11
	MOVQ $0x3030303030303030, R12
	VMOVDQU ·iq4nl(SB), Y13
	VMOVDQU ·mask0f(SB), Y15
	KLOOPS(IQ4X_BLOCK(EACH1, ZERO1, KFOLD1), IQ4X_BLOCK(EACH2, ZERO2, KFOLD2), IQ4X_BLOCK(EACH3, ZERO3, KFOLD3), IQ4X_BLOCK(EACH4, ZERO4, KFOLD4), 136, iqx1, iqx2, iqx3, iqx4, iqxdone, iqxret)
