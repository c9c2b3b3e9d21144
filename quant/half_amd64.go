package quant

import "ubatch/internal/cpu"

//go:noescape
func f32ToF16sF16C(dst *uint16, src *float32, n int)

// f32ToF16sPaths is, by selected path, the path whose F16 conversion runs: F16C (part of the
// AVX2 path) on every amd64 path, the Go twin on "go".
var f32ToF16sPaths = cpu.Resolve(cpu.AVX2)

// f32ToF16sAsm converts the longest prefix of src that is a multiple of 16 with F16C where the
// selected path runs it (f32ToF16sPaths) and returns its length.
func f32ToF16sAsm(dst []uint16, src []float32) int {
	n := len(src) &^ 15
	if f32ToF16sPaths[cpu.Selected()] == cpu.Go || n == 0 {
		return 0
	}
	_ = dst[n-1]
	f32ToF16sF16C(&dst[0], &src[0], n)
	return n
}
