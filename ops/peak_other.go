//go:build !amd64

package ops

// peakLoops: no peak loops in assembly on this architecture yet.
func peakLoops() []PeakLoop { return nil }
