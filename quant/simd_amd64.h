// Small macros shared by the amd64 kernels of this package (dot_*_amd64.s, packed_*_amd64.s,
// quantize_amd64.s, half_amd64.s). Each expands to the instructions the kernels wrote out
// before, so the code and its results are unchanged.

#ifndef QUANT_SIMD_AMD64_H
#define QUANT_SIMD_AMD64_H

// ROW_ARGS loads the row kernels' arguments (n int, w, x *byte, xStride, nx int, out *float32)
// after n: SI w, DI x (column 0), R8 xStride, R11 nx, DX out.
#define ROW_ARGS \
	MOVQ w+8(FP), SI;        \
	MOVQ x+16(FP), DI;       \
	MOVQ xStride+24(FP), R8; \
	MOVQ nx+32(FP), R11;     \
	MOVQ out+40(FP), DX

// CLEAR4 zeroes four registers with op (VXORPS, VPXOR, or VPXORD for Y16-Y31 and zmm).
#define CLEAR4(op, a0, a1, a2, a3) \
	op a0, a0, a0; \
	op a1, a1, a1; \
	op a2, a2, a2; \
	op a3, a3, a3

// BCAST32 sets every dword of the ymm register y (low half x) to the 32-bit constant v; AX is
// clobbered.
#define BCAST32(v, x, y) \
	MOVL         $v, AX; \
	VMOVD        AX, x;  \
	VPBROADCASTD x, y

// COLUMNS sets R10, R12, R13 to activation columns 1-3 from column 0 at DI, R8 bytes apart
// (the register convention of the Q8_0-activation row and panel kernels).
#define COLUMNS \
	LEAQ (DI)(R8*1), R10; \
	LEAQ (DI)(R8*2), R12; \
	LEAQ (R10)(R8*2), R13

// HSUM stores the sum of the 8 floats of acc (whose low half is accx) at dst, with the xmm
// registers t and u as scratch. The additions' order is fixed: pairs 4 apart, then 2, then 1.
#define HSUM(acc, accx, dst, t, u) \
	VEXTRACTF128 $1, acc, t; \
	VADDPS       t, accx, t; \
	VMOVHLPS     t, t, u;    \
	VADDPS       u, t, t;    \
	VMOVSHDUP    t, u;       \
	VADDSS       u, t, t;    \
	VMOVSS       t, dst

// Tables (name an identifier such as ·mask0f or eights<>, off a byte offset): DATA16 sets the 16
// bytes at off to the 8-byte value v twice, DATA32 the 32 bytes at off to v four times, LANES
// the 32 bytes at off to lo, hi in both 128-bit lanes.
#define DATA16(name, off, v) \
	DATA name+(off)(SB)/8, $v; \
	DATA name+(off+8)(SB)/8, $v

#define DATA32(name, off, v) DATA16(name, off, v); DATA16(name, off+16, v)

#define LANES(name, off, lo, hi) \
	DATA name+(off)(SB)/8, $lo;    \
	DATA name+(off+8)(SB)/8, $hi;  \
	DATA name+(off+16)(SB)/8, $lo; \
	DATA name+(off+24)(SB)/8, $hi

// TABLE32 defines the 32-byte read-only table name as the 8-byte values v0..v3.
#define TABLE32(name, v0, v1, v2, v3) \
	DATA name+0(SB)/8, $v0;  \
	DATA name+8(SB)/8, $v1;  \
	DATA name+16(SB)/8, $v2; \
	DATA name+24(SB)/8, $v3; \
	GLOBL name(SB), RODATA|NOPTR, $32

// CONST32 defines the 32-byte read-only constant name as the 8-byte value v four times, CONST4
// the 4-byte one as v.
#define CONST32(name, v) DATA32(name, 0, v); GLOBL name(SB), RODATA|NOPTR, $32
#define CONST4(name, v) DATA name+0(SB)/4, $v; GLOBL name(SB), RODATA|NOPTR, $4

// TOHALF converts the float32s of src to IEEE halves in dst, rounding to nearest, ties to even
// (immediate 0, whatever MXCSR says). The Q8_0 quantizer's scales and f32ToF16sF16C use it, so
// TestF32ToF16AVX2 (through f32ToF16sF16C) checks the quantizer's conversion too.
#define TOHALF(src, dst) VCVTPS2PH $0, src, dst

#endif
