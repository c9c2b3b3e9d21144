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

DATA k2sc<>+0(SB)/8, $0x8000800080008000
DATA k2sc<>+8(SB)/8, $0x8000800080008000
DATA k2sc<>+16(SB)/8, $0x8001800180018001
DATA k2sc<>+24(SB)/8, $0x8001800180018001
DATA k2sc<>+32(SB)/8, $0x8002800280028002
DATA k2sc<>+40(SB)/8, $0x8002800280028002
DATA k2sc<>+48(SB)/8, $0x8003800380038003
DATA k2sc<>+56(SB)/8, $0x8003800380038003
DATA k2sc<>+64(SB)/8, $0x8004800480048004
DATA k2sc<>+72(SB)/8, $0x8004800480048004
DATA k2sc<>+80(SB)/8, $0x8005800580058005
DATA k2sc<>+88(SB)/8, $0x8005800580058005
DATA k2sc<>+96(SB)/8, $0x8006800680068006
DATA k2sc<>+104(SB)/8, $0x8006800680068006
DATA k2sc<>+112(SB)/8, $0x8007800780078007
DATA k2sc<>+120(SB)/8, $0x8007800780078007
DATA k2sc<>+128(SB)/8, $0x8008800880088008
DATA k2sc<>+136(SB)/8, $0x8008800880088008
DATA k2sc<>+144(SB)/8, $0x8009800980098009
DATA k2sc<>+152(SB)/8, $0x8009800980098009
DATA k2sc<>+160(SB)/8, $0x800a800a800a800a
DATA k2sc<>+168(SB)/8, $0x800a800a800a800a
DATA k2sc<>+176(SB)/8, $0x800b800b800b800b
DATA k2sc<>+184(SB)/8, $0x800b800b800b800b
DATA k2sc<>+192(SB)/8, $0x800c800c800c800c
DATA k2sc<>+200(SB)/8, $0x800c800c800c800c
DATA k2sc<>+208(SB)/8, $0x800d800d800d800d
DATA k2sc<>+216(SB)/8, $0x800d800d800d800d
DATA k2sc<>+224(SB)/8, $0x800e800e800e800e
DATA k2sc<>+232(SB)/8, $0x800e800e800e800e
DATA k2sc<>+240(SB)/8, $0x800f800f800f800f
DATA k2sc<>+248(SB)/8, $0x800f800f800f800f
GLOBL k2sc<>(SB), RODATA|NOPTR, $256

DATA k3sc<>+0(SB)/8, $0x0100010001000100
DATA k3sc<>+8(SB)/8, $0x0100010001000100
DATA k3sc<>+16(SB)/8, $0x0302030203020302
DATA k3sc<>+24(SB)/8, $0x0302030203020302
DATA k3sc<>+32(SB)/8, $0x0504050405040504
DATA k3sc<>+40(SB)/8, $0x0504050405040504
DATA k3sc<>+48(SB)/8, $0x0706070607060706
DATA k3sc<>+56(SB)/8, $0x0706070607060706
DATA k3sc<>+64(SB)/8, $0x0908090809080908
DATA k3sc<>+72(SB)/8, $0x0908090809080908
DATA k3sc<>+80(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA k3sc<>+88(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA k3sc<>+96(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA k3sc<>+104(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA k3sc<>+112(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA k3sc<>+120(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL k3sc<>(SB), RODATA|NOPTR, $128

DATA kxsc<>+0(SB)/8, $0x0100010001000100
DATA kxsc<>+8(SB)/8, $0x0100010001000100
DATA kxsc<>+16(SB)/8, $0x0100010001000100
DATA kxsc<>+24(SB)/8, $0x0100010001000100
DATA kxsc<>+32(SB)/8, $0x0302030203020302
DATA kxsc<>+40(SB)/8, $0x0302030203020302
DATA kxsc<>+48(SB)/8, $0x0302030203020302
DATA kxsc<>+56(SB)/8, $0x0302030203020302
DATA kxsc<>+64(SB)/8, $0x0504050405040504
DATA kxsc<>+72(SB)/8, $0x0504050405040504
DATA kxsc<>+80(SB)/8, $0x0504050405040504
DATA kxsc<>+88(SB)/8, $0x0504050405040504
DATA kxsc<>+96(SB)/8, $0x0706070607060706
DATA kxsc<>+104(SB)/8, $0x0706070607060706
DATA kxsc<>+112(SB)/8, $0x0706070607060706
DATA kxsc<>+120(SB)/8, $0x0706070607060706
DATA kxsc<>+128(SB)/8, $0x0908090809080908
DATA kxsc<>+136(SB)/8, $0x0908090809080908
DATA kxsc<>+144(SB)/8, $0x0908090809080908
DATA kxsc<>+152(SB)/8, $0x0908090809080908
DATA kxsc<>+160(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kxsc<>+168(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kxsc<>+176(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kxsc<>+184(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA kxsc<>+192(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kxsc<>+200(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kxsc<>+208(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kxsc<>+216(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA kxsc<>+224(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA kxsc<>+232(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA kxsc<>+240(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA kxsc<>+248(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL kxsc<>(SB), RODATA|NOPTR, $256

CONST32(k23m03<>, 0x0303030303030303)
CONST32(k23m04<>, 0x0404040404040404)
CONST32(k23m0f<>, 0x0f0f0f0f0f0f0f0f)

DATA k23m20<>+0(SB)/8, $0x2020202020202020
DATA k23m20<>+8(SB)/8, $0x2020202020202020
GLOBL k23m20<>(SB), RODATA|NOPTR, $16

DATA k23shift<>+0(SB)/8, $0
DATA k23shift<>+8(SB)/8, $0
DATA k23shift<>+16(SB)/8, $4
DATA k23shift<>+24(SB)/8, $4
GLOBL k23shift<>(SB), RODATA|NOPTR, $32

// k23iq4 is kvalues_iq4nl in both lanes.
DATA k23iq4<>+0(SB)/8, $0xf6eaddcfbfad9881
DATA k23iq4<>+8(SB)/8, $0x7159453526190d01
DATA k23iq4<>+16(SB)/8, $0xf6eaddcfbfad9881
DATA k23iq4<>+24(SB)/8, $0x7159453526190d01
GLOBL k23iq4<>(SB), RODATA|NOPTR, $32

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
	VPAND k23m0f<>(SB), Y14, Y14; \
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
	VPAND k23m0f<>(SB), X8, X8; \
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
	VPSRLVQ k23shift<>(SB), Y8, Y8; \
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
	VMOVDQU k23iq4<>(SB), Y13
	VMOVDQU k23m0f<>(SB), Y15
	KLOOPS(IQ4X_BLOCK(EACH1, ZERO1, KFOLD1), IQ4X_BLOCK(EACH2, ZERO2, KFOLD2), IQ4X_BLOCK(EACH3, ZERO3, KFOLD3), IQ4X_BLOCK(EACH4, ZERO4, KFOLD4), 136, iqx1, iqx2, iqx3, iqx4, iqxdone, iqxret)
