package ops

// deltaRowAsm is one row of DeltaRuleStep in AVX2/FMA (deltanet_amd64.s): n > 0, a multiple of
// 8, elements at s, k and q; it returns the row's dot with q before the scale.
//
//go:noescape
func deltaRowAsm(n int, s, k, q *float32, decay, v, beta float32) float32
