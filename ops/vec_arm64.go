package ops

// On arm64 the four vector kernels use NEON assembly (vec_arm64.s; NEON is part of every arm64
// CPU) for the first multiple of 8 elements, the rest in Go (vec_asm.go), where asmOn. The activation kernels
// (SwiGLU, softmax) stay the Go twins here; attention over F16 and Q8_0 caches uses these vector
// kernels (attn_arm64.go).

//go:noescape
func dotF32NEON(n int, x, y *float32) float32

//go:noescape
func dotF16NEON(n int, x *float32, y *uint16) float32

//go:noescape
func axpyF32NEON(n int, a float32, x, y *float32)

//go:noescape
func axpyF16NEON(n int, a float32, x *uint16, y *float32)

// The kernels of vec_asm.go: n, a multiple of 8, elements at x and y.
func dotF32Asm(n int, x, y *float32) float32             { return dotF32NEON(n, x, y) }
func dotF16Asm(n int, x *float32, y *uint16) float32     { return dotF16NEON(n, x, y) }
func axpyF32Asm(n int, a float32, x, y *float32)         { axpyF32NEON(n, a, x, y) }
func axpyF16Asm(n int, a float32, x *uint16, y *float32) { axpyF16NEON(n, a, x, y) }
