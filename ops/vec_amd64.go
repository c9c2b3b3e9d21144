package ops

import "golang.org/x/sys/cpu"

// vecAsm reports whether the AVX2/FMA/F16C assembly of vec_amd64.s, act_amd64.s and attn_amd64.s
// is used (for the vector kernels in vec_asm.go, the first multiple of 8 elements).
var vecAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// vecFast reports whether the exported vector kernels (vec_asm.go) use assembly.
var vecFast = vecAsm

//go:noescape
func dotF32AVX2(n int, x, y *float32) float32

//go:noescape
func dotF16AVX2(n int, x *float32, y *uint16) float32

//go:noescape
func axpyF32AVX2(n int, a float32, x, y *float32)

//go:noescape
func axpyF16AVX2(n int, a float32, x *uint16, y *float32)

// The kernels of vec_asm.go: n, a multiple of 8, elements at x and y.
func dotF32Asm(n int, x, y *float32) float32             { return dotF32AVX2(n, x, y) }
func dotF16Asm(n int, x *float32, y *uint16) float32     { return dotF16AVX2(n, x, y) }
func axpyF32Asm(n int, a float32, x, y *float32)         { axpyF32AVX2(n, a, x, y) }
func axpyF16Asm(n int, a float32, x *uint16, y *float32) { axpyF16AVX2(n, a, x, y) }
