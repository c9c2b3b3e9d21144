package ops

// The AVX2/FMA/F16C vector kernels of vec_asm.go (vec_amd64.s), used where asmOn.

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
