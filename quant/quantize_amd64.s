#include "textflag.h"
#include "simd_amd64.h"

// Q8_0 activation quantization with AVX2 and F16C (see quantize_amd64.go).
//
// func quantizeQ8_0AVX2Asm(nb int, src *float32, dst *byte)
//
// One 32-float block per iteration: Y0-Y3 the inputs, Y4-Y7 their magnitudes (then the signed
// halves), Y8/Y9 the running maxima. Constants: Y15 |x| mask, Y14 0.49999997 (the "half" of
// roundAway127), Y13 the VPERMD order, Y12 zero, X10 1 (X11 is scratch). SI src, DI dst, CX blocks left.

CONST4(q8absmask<>, 0x7fffffff)
CONST4(q8half<>, 0x3effffff)
CONST4(q8f127<>, 0x42fe0000)
CONST4(q8f1<>, 0x3f800000)

// VPACKSSDW/VPACKSSWB work within 128-bit lanes and leave the dwords (groups of four quants) in
// the order 0 2 4 6 1 3 5 7; this VPERMD index puts them back.
DATA q8perm<>+0(SB)/4, $0
DATA q8perm<>+4(SB)/4, $4
DATA q8perm<>+8(SB)/4, $1
DATA q8perm<>+12(SB)/4, $5
DATA q8perm<>+16(SB)/4, $2
DATA q8perm<>+20(SB)/4, $6
DATA q8perm<>+24(SB)/4, $3
DATA q8perm<>+28(SB)/4, $7
GLOBL q8perm<>(SB), RODATA|NOPTR, $32

TEXT ·quantizeQ8_0AVX2Asm(SB), NOSPLIT, $0-24
	MOVQ  nb+0(FP), CX
	MOVQ  src+8(FP), SI
	MOVQ  dst+16(FP), DI
	TESTQ CX, CX
	JLE   done

	VBROADCASTSS q8absmask<>(SB), Y15
	VBROADCASTSS q8half<>(SB), Y14
	VMOVDQU      q8perm<>(SB), Y13
	VXORPS       Y12, Y12, Y12
	VMOVSS       q8f1<>(SB), X10

block:
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VANDPS  Y15, Y0, Y4
	VANDPS  Y15, Y1, Y5
	VANDPS  Y15, Y2, Y6
	VANDPS  Y15, Y3, Y7

	// amax. VMAXPS A, B, C sets C = B > A ? B : A, so a NaN in B leaves A. Each chain starts
	// from zero and only ever has magnitudes in B, so NaN inputs are skipped exactly like the Go
	// twin's a > amax, and the NaN-free partial maxima can then be combined in any order.
	VMAXPS Y12, Y4, Y8
	VMAXPS Y12, Y6, Y9
	VMAXPS Y8, Y5, Y8
	VMAXPS Y9, Y7, Y9
	VMAXPS Y9, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VMAXPS       X9, X8, X8
	VMOVHLPS     X8, X8, X9
	VMAXPS       X9, X8, X8
	VMOVSHDUP    X8, X9
	VMAXSS       X9, X8, X8

	// The halves ±0.5 with each input's sign: x ^ |x| is x's sign bit.
	VXORPS Y4, Y0, Y4
	VXORPS Y5, Y1, Y5
	VXORPS Y6, Y2, Y6
	VXORPS Y7, Y3, Y7
	VORPS  Y14, Y4, Y4
	VORPS  Y14, Y5, Y5
	VORPS  Y14, Y6, Y6
	VORPS  Y14, Y7, Y7

	// d = amax/127, id = d != 0 ? 1/d : 0 (1/0 would be +Inf; the mask clears it).
	VDIVSS q8f127<>(SB), X8, X8
	VDIVSS X8, X10, X9
	VCMPSS $4, X12, X8, X11
	VANDPS X11, X9, X9
	VBROADCASTSS X9, Y9

	// The scale: 8 bytes are stored, the 6 after the half are overwritten by the quants below.
	TOHALF(X8, X8)
	VMOVQ X8, 0(DI)

	// q = clamp(trunc(x*id + ±0.5), -128, 127). The signed saturation of the packs is the clamp;
	// VCVTTPS2DQ turns out-of-range values and NaN into INT32_MIN, which saturates to -128.
	VMULPS     Y9, Y0, Y0
	VMULPS     Y9, Y1, Y1
	VMULPS     Y9, Y2, Y2
	VMULPS     Y9, Y3, Y3
	VADDPS     Y4, Y0, Y0
	VADDPS     Y5, Y1, Y1
	VADDPS     Y6, Y2, Y2
	VADDPS     Y7, Y3, Y3
	VCVTTPS2DQ Y0, Y0
	VCVTTPS2DQ Y1, Y1
	VCVTTPS2DQ Y2, Y2
	VCVTTPS2DQ Y3, Y3
	VPACKSSDW  Y1, Y0, Y0
	VPACKSSDW  Y3, Y2, Y2
	VPACKSSWB  Y2, Y0, Y0
	VPERMD     Y0, Y13, Y0
	VMOVDQU    Y0, 2(DI)

	ADDQ $128, SI
	ADDQ $34, DI
	DECQ CX
	JNZ  block
	VZEROUPPER

done:
	RET
