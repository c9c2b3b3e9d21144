package sample

import "math"

const (
	log2e = 1.4426950408889634
	ln2Hi = 6.93147180369123816490e-01 // ln 2 split in two so that k*ln2Hi is exact
	ln2Lo = 1.90821492927058770002e-10
)

// expNeg returns e^x for x <= 0 (including -Inf) with a relative error below 1e-8, several
// times faster than math.Exp: sampling and log-probabilities need one exponential per
// vocabulary entry, and their results are float32 anyway. Inputs above 0 are not supported.
func expNeg(x float64) float64 {
	if x < -700 {
		return 0 // also -Inf; e^-700 is far below anything a float32 probability can hold
	}
	// x = k ln2 + r with |r| <= ln2/2; t - 0.5 truncated rounds t <= 0 to the nearest integer.
	k := int64(x*log2e - 0.5)
	kf := float64(k)
	r := x - kf*ln2Hi - kf*ln2Lo
	// Taylor series of e^r to degree 8: the first omitted term is below 2.2e-10 for |r| <= 0.35.
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040+r*(1.0/40320))))))))
	// Scale by 2^k through the exponent bits; k >= -1010 keeps the result a normal number.
	return math.Float64frombits(math.Float64bits(p) + uint64(k)<<52)
}
