// Macros shared by the NEON integer kernels (dot_q8_arm64.s, dot_q4k_arm64.s, dot_q5k_arm64.s,
// dot_q6k_arm64.s, dot_k23_arm64.s). Go's assembler has no mnemonics for the widening integer
// products, SDOT and the pairwise adds, so those are WORD encodings; each carries the instruction
// it encodes (GNU syntax, as `llvm-mc -triple=aarch64 -mattr=+dotprod -show-encoding` prints
// it) and the tests against the Go twins check them.
//
// Every kernel comes in two variants that differ only in the int8 dot: the SMULL one (every
// ARMv8 CPU) and the SDOT one (ARMv8.2 DotProd). Both leave four int32 partial sums in V16.

// IDOT_SMULL sets V16 to the dot of the 32 int8 in V0:V1 with those in V2:V3 as four int32
// partial sums, with 16-bit products widened pairwise (exact for every int8 input). It
// overwrites V4-V7.
#define IDOT_SMULL \
	WORD	$0x0e22c004 /* smull  v4.8h, v0.8b, v2.8b */; \
	WORD	$0x4e22c005 /* smull2 v5.8h, v0.16b, v2.16b */; \
	WORD	$0x0e23c026 /* smull  v6.8h, v1.8b, v3.8b */; \
	WORD	$0x4e23c027 /* smull2 v7.8h, v1.16b, v3.16b */; \
	WORD	$0x4e602890 /* saddlp v16.4s, v4.8h */; \
	WORD	$0x4e6068b0 /* sadalp v16.4s, v5.8h */; \
	WORD	$0x4e6068d0 /* sadalp v16.4s, v6.8h */; \
	WORD	$0x4e6068f0 /* sadalp v16.4s, v7.8h */

// IDOT_SDOT is IDOT_SMULL with the dot-product extension.
#define IDOT_SDOT \
	VEOR	V16.B16, V16.B16, V16.B16; \
	WORD	$0x4e829410 /* sdot v16.4s, v0.16b, v2.16b */; \
	WORD	$0x4e839430 /* sdot v16.4s, v1.16b, v3.16b */

// IDOT16_SMULL sets V16 to the dot of the 16 int8 in V0 with those in V2 (the 16-element groups
// of Q2_K, Q3_K and Q6_K). It overwrites V4, V5.
#define IDOT16_SMULL \
	WORD	$0x0e22c004 /* smull  v4.8h, v0.8b, v2.8b */; \
	WORD	$0x4e22c005 /* smull2 v5.8h, v0.16b, v2.16b */; \
	WORD	$0x4e602890 /* saddlp v16.4s, v4.8h */; \
	WORD	$0x4e6068b0 /* sadalp v16.4s, v5.8h */

// IDOT16_SDOT is IDOT16_SMULL with the dot-product extension.
#define IDOT16_SDOT \
	VEOR	V16.B16, V16.B16, V16.B16; \
	WORD	$0x4e829410 /* sdot v16.4s, v0.16b, v2.16b */

// SUMS8 reduces the lanes of V20-V27 pairwise into eight sums and stores them at R2 (the
// sub-block dots of Q4_K, Q5_K and IQ4_XS). It overwrites V28, V29 and V31.
#define SUMS8 \
	VADDP	V21.S4, V20.S4, V28.S4; \
	VADDP	V23.S4, V22.S4, V29.S4; \
	VADDP	V29.S4, V28.S4, V28.S4; \
	VADDP	V25.S4, V24.S4, V29.S4; \
	VADDP	V27.S4, V26.S4, V31.S4; \
	VADDP	V31.S4, V29.S4, V29.S4; \
	VST1	[V28.S4, V29.S4], (R2)

// RED4 reduces V20-V23 to their four sums and stores them at R2, advancing it (the group dots of
// Q2_K, Q3_K and Q6_K, four at a time). It overwrites V24, V25.
#define RED4 \
	VADDP	V21.S4, V20.S4, V24.S4; \
	VADDP	V23.S4, V22.S4, V25.S4; \
	VADDP	V25.S4, V24.S4, V24.S4; \
	VST1.P	[V24.S4], 16(R2)

// BITS sets each byte of V10 (V11) to that of V29 where the byte of a (b) has a bit of the
// byte of m set, else to 0: the fifth bits of Q5_0, Q5_1 and Q5_K, the hmask bits of Q3_K.
#define BITS(m, a, b) \
	VCMTST	m.B16, a.B16, V10.B16; \
	VCMTST	m.B16, b.B16, V11.B16; \
	VAND	V29.B16, V10.B16, V10.B16; \
	VAND	V29.B16, V11.B16, V11.B16

// KERNELS defines a kernel's two variants, TEXT neon and TEXT sdot (frame: the argument size, as
// in $0-24), from BODY(IDOT): BODY(SMULL) and BODY(SDOT). KERNELS32 passes the 32-element dots,
// KERNELS16 the 16-element ones.
#define KERNELS(neon, sdot, frame, BODY, SMULL, SDOT) \
TEXT neon(SB), NOSPLIT, frame; \
	BODY(SMULL); \
	RET; \
TEXT sdot(SB), NOSPLIT, frame; \
	BODY(SDOT); \
	RET

#define KERNELS32(neon, sdot, frame, BODY) KERNELS(neon, sdot, frame, BODY, IDOT_SMULL, IDOT_SDOT)
#define KERNELS16(neon, sdot, frame, BODY) KERNELS(neon, sdot, frame, BODY, IDOT16_SMULL, IDOT16_SDOT)
