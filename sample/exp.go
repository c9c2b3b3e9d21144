package sample

import "math"

// widen converts w, which is 0 or a positive normal float32 (any ops.ExpNeg result), to float64
// through its bits, for the reason given at ops.ExpNeg.
func widen(w float32) float64 {
	b := math.Float32bits(w)
	if b == 0 {
		return 0
	}
	// Rebias the exponent (1023-127 = 896) and move the 23-bit mantissa to the top of 52.
	return math.Float64frombits(uint64(b>>23+896)<<52 | uint64(b&0x7fffff)<<29)
}
