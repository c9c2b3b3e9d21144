// Macros shared by the Q4_K and Q6_K panel kernels (packed_k_amd64.s, AVX2; packed_k_vnni_amd64.s,
// AVX-512 VNNI on ymm; packed_k_vnni512_amd64.s, on zmm): the frame, the scale/min unpacking, the
// Q4_K sub-block and super-block loops, the Q6_K group-pair and super-block loops, the min sums
// and the folding, which are the same instructions in all (registers and the product
// instructions are arguments). The tables ·k4dup, ·k4m30 and ·q6dup are defined in
// packed_k_amd64.s.

#include "packed_amd64.h"

// Software prefetch distance in bytes ahead of the current super-block: the panels are streamed
// once per token group, in order. 2048 as the Q8_0/Q4_0 zmm kernels' ZPFD: on an AMD EPYC Zen 5
// tinyllama Q4_K_M tg64 ran 44.7-50.5 t/s by CPU time at 4096 and 49.7-55.5 at 2048 (four
// interleaved rounds), pp512 the same (286-320 against 291-310).
#define KPF 2048

// KPF2 and KPF3 prefetch the first 2 or 3 cache lines of the super-block KPF bytes ahead of the
// one at base ((SI), or (SI)(R14*1) for the second panel of a zmm pair).
#define KPF2(base) PREFETCHT0 KPF base; PREFETCHT0 KPF+64 base
#define KPF3(base) KPF2(base); PREFETCHT0 KPF+128 base

// The kernels' arguments: (np, nb int, w, x *byte, xStride, nx int, out *float32, outStride
// int), frame -64. As the Q8_0/Q4_0 kernels (packed_amd64.h), they run np panels, which follow
// each other in w; each starts over at x and writes the 8 floats after the previous panel's.
// KP_ARGS loads them (BX counts the panels down); KP_PROLOGUE also sets the dwords of Y15 to
// mask.
#define KP_PROLOGUE(mask) KP_ARGS; BCAST32(mask, X15, Y15)

#define KP_ARGS MOVQ np+0(FP), BX; PANEL_ARGS

// KP_PANEL starts a panel: all super-blocks to go, the columns from their start.
#define KP_PANEL \
	MOVQ nb+8(FP), CX; \
	MOVQ x+24(FP), DI; \
	COLUMNS

// KP_NEXT advances the weights by wbytes and the four columns by one Q8_K block and counts down.
#define KP_NEXT(wbytes) \
	ADDQ $wbytes, SI; \
	ADDQ $292, DI;    \
	ADDQ $292, R10;   \
	ADDQ $292, R12;   \
	ADDQ $292, R13;   \
	DECQ CX

// KP_START starts a panel with its results a0..a3 (ymm) cleared; ZKP_START a pair of panels
// (packed_k_vnni512_amd64.s) with its zmm results cleared.
#define KP_START(a0, a1, a2, a3) KP_PANEL; CLEAR4(VXORPS, a0, a1, a2, a3)
#define ZKP_START(a0, a1, a2, a3) KP_PANEL; CLEAR4(VPXORD, a0, a1, a2, a3)

// KP_NONE is an empty step (no final fix-up, no clearing).
#define KP_NONE

// KP_KERNEL is a kernel's body after KP_PROLOGUE (and any other constants): PANEL_LOOPS (packed_amd64.h)
// over super-blocks run by Bn (which ends with KP_NEXT), the results in a0..a3.
#define KP_KERNEL(B1, B2, B3, B4, a0, a1, a2, a3, lp, l1, l2, l3, l4, ldone, lnext) \
	PANEL_LOOPS(KP_START(a0, a1, a2, a3), B1, B2, B3, B4, KP_NONE, a0, a1, a2, a3, PANEL_STEP, lp, l1, l2, l3, l4, ldone, lnext)

// ZKP_KERNEL is KP_KERNEL for the zmm kernels, two panels at a time (BX counts pairs).
#define ZKP_KERNEL(B1, B2, B3, B4, a0, a1, a2, a3, lp, l1, l2, l3, l4, ldone, lnext) \
	PANEL_LOOPS(ZKP_START(a0, a1, a2, a3), B1, B2, B3, B4, KP_NONE, a0, a1, a2, a3, ZP_STEP, lp, l1, l2, l3, l4, ldone, lnext)

// K4W decodes chunk c of sub-block s: Y12 = levels of elements 32s+4c.., Y13 of 32s+16+4c...
#define K4W(s, c) \
	VMOVDQU 128+128*s+32*c(SI), Y12; \
	VPSRLW  $4, Y12, Y13;            \
	VPAND   Y15, Y12, Y12;           \
	VPAND   Y15, Y13, Y13

// K4UNPACK decodes the scale/min vectors U_0..U_3 (see packed_k.go) of the super-block to the
// frame at 32q(SP) (Y12-Y14 scratch): byte 4r+v of U_q is [sc_2q, m_2q, sc_2q+1, m_2q+1][v] of
// row r, so VPSHUFB with k4dup picks the 8 rows' pairs (sc, sc) or (m, m) of one sub-block.
// U_q's low 4 bits are the low (q = 0, 2) or high (q = 1, 3) nibbles of A (at 32) or B (at 64),
// its bits 4-5 those of C (at 96, in Y14) shifted into place.
#define K4UNPACK \
	VMOVDQU 96(SI), Y14;      \
	VPAND   32(SI), Y15, Y12; \
	VPSLLW  $4, Y14, Y13;     \
	K4UTOP(Y13, 0);           \
	K4HIGH(32);               \
	VPSLLW  $2, Y14, Y13;     \
	K4UTOP(Y13, 32);          \
	VPAND   64(SI), Y15, Y12; \
	K4UTOP(Y14, 64);          \
	K4HIGH(64);               \
	VPSRLW  $2, Y14, Y13;     \
	K4UTOP(Y13, 96)

// K4HIGH sets Y12 to the high nibbles of the 32 bytes at off(SI).
#define K4HIGH(off) \
	VMOVDQU off(SI), Y12;  \
	VPSRLW  $4, Y12, Y12; \
	VPAND   Y15, Y12, Y12

// K4UTOP adds bits 4-5 of t (C's bits, shifted) to the low bits in Y12 and stores U_q at off(SP).
#define K4UTOP(t, off) \
	VPAND   ·k4m30(SB), t, Y13; \
	VPOR    Y13, Y12, Y12;      \
	VMOVDQU Y12, off(SP)

// K4CHUNKS runs the four chunks of sub-block s: W decodes chunk c, then F (the first chunk) or
// C (the others) adds its products for the columns in use.
#define K4CHUNKS(s, W, F, C) \
	W(s, 0); \
	F(s, 0); \
	W(s, 1); \
	C(s, 1); \
	W(s, 2); \
	C(s, 2); \
	W(s, 3); \
	C(s, 3)

// K4SUB runs sub-block s of the ymm kernels: Z (clearing sums, or KP_NONE), the chunks (K4CHUNKS
// with F and C), then S, which scales the sums by the sub-block's scales in Y14: picked with the
// table entry at sel (an address before (SB)) from U_(s/2), loaded from uoff(SP).
#define K4SUB(s, uoff, sel, Z, F, C, S) \
	PREFETCHT0 KPF+128+128*s(SI); \
	PREFETCHT0 KPF+192+128*s(SI); \
	Z;                            \
	K4CHUNKS(s, K4W, F, C);       \
	VMOVDQU uoff(SP), Y12;        \
	VPSHUFB sel(SB), Y12, Y14;    \
	S

// K4SUBS runs the 8 sub-blocks with SUB(s, U, sel, Z, F, C, S): U is U_(s/2) (u0..u3), sel the
// scale table entry ev for even s and od for odd s; SF scales sub-block 0 (setting the sums).
#define K4SUBS(SUB, u0, u1, u2, u3, ev, od, Z, F, C, SF, S) \
	SUB(0, u0, ev, Z, F, C, SF); \
	SUB(1, u0, od, Z, F, C, S);  \
	SUB(2, u1, ev, Z, F, C, S);  \
	SUB(3, u1, od, Z, F, C, S);  \
	SUB(4, u2, ev, Z, F, C, S);  \
	SUB(5, u2, od, Z, F, C, S);  \
	SUB(6, u3, ev, Z, F, C, S);  \
	SUB(7, u3, od, Z, F, C, S)

// K4BLOCK runs one super-block of the ymm Q4_K kernels for the column sets given and counts
// down; ev and od are the scale tables' entries for even and odd sub-blocks (·k4dup+0, ·k4dup+64
// for the AVX2 scale pairs; ·vk4sc+0, ·vk4sc+32 for the VNNI scales).
#define K4BLOCK(ev, od, Z, F, C, SF, S, MF, M, FOLD) \
	K4UNPACK;                                                 \
	K4SUBS(K4SUB, 0, 32, 64, 96, ev, od, Z, F, C, SF, S);     \
	K4MINS(MF, M);                                            \
	VCVTPH2PS  (SI), Y12;                                     \
	VCVTPH2PS  16(SI), Y13;                                   \
	FOLD;                                                     \
	KPF2((SI));                                               \
	KP_NEXT(1152)

// Min sums: macc = Σ_s (m_s, m_s)·(bsum_2s, bsum_2s+1) per lane, with the pairs in m (t
// scratch; ymm or zmm); K4MINF starts macc with sub-block 0, K4MINA adds the others.
#define K4MINF(s, P, macc, m, t) \
	VPBROADCASTD 260+4*s(P), t; \
	VPMADDWD     m, t, macc

#define K4MINA(s, P, macc, m, t) \
	VPBROADCASTD 260+4*s(P), t; \
	VPMADDWD     m, t, t;       \
	VPADDD       t, macc, macc

#define K4MF(s, P, macc) K4MINF(s, P, macc, Y13, Y14)
#define K4MA(s, P, macc) K4MINA(s, P, macc, Y13, Y14)

#define K4MF1(s) K4MF(s, DI, Y0)
#define K4MF2(s) K4MF1(s); K4MF(s, R10, Y1)
#define K4MF3(s) K4MF2(s); K4MF(s, R12, Y2)
#define K4MF4(s) K4MF3(s); K4MF(s, R13, Y3)
#define K4M1(s) K4MA(s, DI, Y0)
#define K4M2(s) K4M1(s); K4MA(s, R10, Y1)
#define K4M3(s) K4M2(s); K4MA(s, R12, Y2)
#define K4M4(s) K4M3(s); K4MA(s, R13, Y3)

// K4MINQ runs the min sums of sub-blocks 2q and 2q+1 (A for the first, B for the second) from
// U_q in U: the shuffles ev and od (k4dup+32, k4dup+96) pick their (m, m) pairs into m.
#define K4MINQ(ev, od, U, m, q, A, B) \
	VPSHUFB ev, U, m; \
	A((2*q));         \
	VPSHUFB od, U, m; \
	B((2*q+1))

// K4MINS runs the min sums of the 8 sub-blocks, U_q loaded from the frame (MF starts them).
#define K4MQ(q, A, B) VMOVDQU 32*q(SP), Y12; K4MINQ(·k4dup+32(SB), ·k4dup+96(SB), Y12, Y13, q, A, B)
#define K4MINS(MF, M) K4MQ(0, MF, M); K4MQ(1, M, M); K4MQ(2, M, M); K4MQ(3, M, M)

// K4FOLDR folds column P's super-block sums into facc: facc += dx·(d·iacc − dmin·macc), with
// the rows' d and dmin in the registers d and dmin (t scratch; ymm or zmm). K4FOLD: the 8 rows'
// d in Y12 and dmin in Y13.
#define K4FOLDR(P, macc, iacc, facc, d, dmin, t) \
	VCVTDQ2PS    iacc, iacc;      \
	VCVTDQ2PS    macc, macc;      \
	VMULPS       d, iacc, iacc;   \
	VFNMADD231PS dmin, macc, iacc; \
	VBROADCASTSS (P), t;          \
	VFMADD231PS  t, iacc, facc

#define K4FOLD(P, macc, iacc, facc) K4FOLDR(P, macc, iacc, facc, Y12, Y13, Y14)

#define K4FOLD1 K4FOLD(DI, Y0, Y4, Y8)
#define K4FOLD2 K4FOLD1; K4FOLD(R10, Y1, Y5, Y9)
#define K4FOLD3 K4FOLD2; K4FOLD(R12, Y2, Y6, Y10)
#define K4FOLD4 K4FOLD3; K4FOLD(R13, Y3, Y7, Y11)

// Q6DA decodes the levels of elements 16u+0..3 (Y10) and 16u+4..7 (Y11) of unit u; Q6DB those of
// 16u+8..11 (Y10) and 16u+12..15 (Y11), the latter from bits 6-7 of the three chunks.
#define Q6DA(u) \
	VPAND 144+96*u(SI), Y15, Y10; \
	VPAND 176+96*u(SI), Y15, Y11

#define Q6DB(u) \
	VPAND  208+96*u(SI), Y15, Y10; \
	VPANDN 144+96*u(SI), Y15, Y11; \
	VPSRLW $2, Y11, Y11;           \
	VPANDN 176+96*u(SI), Y15, Y12; \
	VPOR   Y12, Y11, Y11;          \
	VPSRLW $2, Y11, Y11;           \
	VPANDN 208+96*u(SI), Y15, Y12; \
	VPOR   Y12, Y11, Y11;          \
	VPSRLW $2, Y11, Y11

// Q6FOLDR folds column P's super-block sum into facc: facc += iacc·(d·dx), the rows' d in the
// register d (t scratch; ymm or zmm). Q6FOLD: d in Y14.
#define Q6FOLDR(P, iacc, facc, d, t) \
	VCVTDQ2PS    iacc, iacc; \
	VBROADCASTSS (P), t;     \
	VMULPS       d, t, t;    \
	VFMADD231PS  t, iacc, facc

#define Q6FOLD(P, iacc, facc) Q6FOLDR(P, iacc, facc, Y14, Y12)

// Q6SUM3 adds a column's two further sums b and c into iacc (the VNNI kernels' three chains).
#define Q6SUM3(iacc, b, c) VPADDD b, iacc, iacc; VPADDD c, iacc, iacc

// Q6PROD leaves in t the word sums of the two level vectors l0 and l1 times column P's 8
// activations at off (u scratch): the first half of a Q6_K column step, which the kernels then
// scale by the group's scale pair.
#define Q6PROD(off, P, l0, l1, t, u) \
	VPBROADCASTD off(P), t;   \
	VPMADDUBSW   t, l0, t;    \
	VPBROADCASTD 4+off(P), u; \
	VPMADDUBSW   u, l1, u;    \
	VPADDW       u, t, t

// Q6PAIRS runs the 8 group pairs of a Q6_K super-block with PAIR(i, u0, u1, C, O): pair i is
// groups u0 = 2i and u1 = 2i+1, C the column set, O the offset subtraction.
#define Q6PAIRS(PAIR, C, O) \
	PAIR(0, 0, 1, C, O);   \
	PAIR(1, 2, 3, C, O);   \
	PAIR(2, 4, 5, C, O);   \
	PAIR(3, 6, 7, C, O);   \
	PAIR(4, 8, 9, C, O);   \
	PAIR(5, 10, 11, C, O); \
	PAIR(6, 12, 13, C, O); \
	PAIR(7, 14, 15, C, O)

// Q6PAIR runs group pair i of the ymm Q6_K kernels: the scale pairs to Y8, the groups' (sc, sc)
// to Y9 in turn for UNIT(u, C), then X32 turns Y8 into the offsets' multipliers (32 or −32 times
// the scale pairs) for O(i).
#define Q6PAIR(i, u0, u1, UNIT, X32, C, O) \
	PREFETCHT0 KPF+144+192*i(SI);    \
	PREFETCHT0 KPF+208+192*i(SI);    \
	PREFETCHT0 KPF+272+192*i(SI);    \
	VPMOVSXBW  16+16*i(SI), Y8;      \
	VPSHUFB    ·q6dup+0(SB), Y8, Y9;  \
	UNIT(u0, C);                      \
	VPSHUFB    ·q6dup+32(SB), Y8, Y9; \
	UNIT(u1, C);                      \
	X32;                              \
	O(i)

// Q6BLOCK runs one super-block of the ymm Q6_K kernels: Z clears the sums, PAIR runs a group pair
// (Q6PAIR with the kernel's UNIT and X32), FOLD folds the sums into the results; then it counts
// down.
#define Q6BLOCK(PAIR, Z, C, O, FOLD) \
	Z;                      \
	Q6PAIRS(PAIR, C, O);    \
	VCVTPH2PS  (SI), Y14;   \
	FOLD;                   \
	KPF3((SI));             \
	KP_NEXT(1680)
