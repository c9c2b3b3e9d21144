// Macros shared by vec_amd64.s and act_amd64.s: the counting of their loops, the stores and the
// end of a reduction over ymm accumulators.

// FOLD4(OP): Y0 = (Y0 OP Y1) OP (Y2 OP Y3), lane-wise; Y2 overwritten.
#define FOLD4(OP) \
	OP Y1, Y0, Y0; \
	OP Y3, Y2, Y2; \
	OP Y2, Y0, Y0

// HFOLD(OPPS, OPSS): the 8 floats of Y0 folded by OPPS, the last pair by OPSS, into X0 (VADDPS,
// VADDSS: their sum; VMAXPS, VMAXSS: their maximum); X1 overwritten.
#define HFOLD(OPPS, OPSS) \
	VEXTRACTF128 $1, Y0, X1; \
	OPPS         X1, X0, X0; \
	VMOVHLPS     X0, X0, X1; \
	OPPS         X1, X0, X0; \
	VMOVSHDUP    X0, X1;     \
	OPSS         X1, X0, X0

// TAIL(done): to done when no elements are left (CX = 0).
#define TAIL(done) \
	TESTQ CX, CX; \
	JZ    done

// COUNT(n, loop): n elements counted off CX; to loop while n more are left.
#define COUNT(n, loop) \
	SUBQ $n, CX;  \
	CMPQ CX, $n;  \
	JGE  loop

// STORE4(p): Y0-Y3 to the 32 floats at p.
#define STORE4(p) \
	VMOVUPS Y0, (p);   \
	VMOVUPS Y1, 32(p); \
	VMOVUPS Y2, 64(p); \
	VMOVUPS Y3, 96(p)
