package ops

// sumWordsAVX2 sums n words at x, n > 0 a multiple of 32.
//
//go:noescape
func sumWordsAVX2(n int, x *uint64) uint64
