#include "textflag.h"
#include "simd_amd64.h"

// func f32ToF16sF16C(dst *uint16, src *float32, n int)
// dst[i] = F32ToF16(src[i]) for i < n, n a positive multiple of 16: TOHALF, VCVTPS2PH with
// rounding mode 0 (to nearest, ties to even, whatever MXCSR says), which quiets NaNs keeping the
// top payload bits and flushes nothing: the Go twin's results exactly (TestF32ToF16AVX2).
TEXT ·f32ToF16sF16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX

loop:
	VMOVUPS   (SI), Y0
	VMOVUPS   32(SI), Y1
	TOHALF(Y0, (DI))
	TOHALF(Y1, 16(DI))
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       loop
	VZEROUPPER
	RET
