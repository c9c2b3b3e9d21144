package quant

import "ubatch/internal/cpu"

//go:noescape
func f32ToF16sF16C(dst *uint16, src *float32, n int)

// f32ToF16sAsm converts the longest prefix of src that is a multiple of 16 with F16C where the
// selected path runs assembly (every amd64 path has F16C) and returns its length.
func f32ToF16sAsm(dst []uint16, src []float32) int {
	n := len(src) &^ 15
	if cpu.Selected() == cpu.Go || n == 0 {
		return 0
	}
	_ = dst[n-1]
	f32ToF16sF16C(&dst[0], &src[0], n)
	return n
}
