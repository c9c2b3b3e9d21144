package ops

import (
	"sync"
	"time"
)

// ReadBandwidth measures memory read bandwidth in bytes per second: threads goroutines each
// stream their share of buf (which should be far larger than the last-level cache) through
// SumWords, rounds times, and the fastest round counts. SumWords' assembly does nothing but
// load (8 independent 32-byte loads and adds per 256 bytes), so what limits it is memory, not
// the core, as for a decode step's weights; a multiply-add loop measured 20-30% less. Like every
// kernel it follows the selected path: on "go" (ubatch --kernels go) it runs the Go twin, which
// may make the core, not memory, the limit.
func ReadBandwidth(buf []uint64, threads, rounds int) float64 {
	threads = max(1, threads)
	for i := range buf { // fault every page in before timing
		buf[i] = uint64(i)
	}
	best := time.Duration(1<<63 - 1)
	sinks := make([]uint64, threads)
	for range max(1, rounds) {
		var wg sync.WaitGroup
		start := time.Now()
		for w := range threads {
			lo, hi := Split(len(buf), threads, 32, w)
			wg.Go(func() { sinks[w] += SumWords(buf[lo:hi]) })
		}
		wg.Wait()
		best = min(best, time.Since(start))
	}
	return float64(8*len(buf)) / best.Seconds()
}

// SumWords returns the sum of x modulo 2^64 (any order gives the same bits): a pure read of x.
func SumWords(x []uint64) uint64 {
	n := 0
	var s uint64
	if runsAsm(opSumWords) && len(x) >= 32 {
		n = len(x) &^ 31
		s = sumWordsAVX2(n, &x[0])
	}
	return s + sumWordsGo(x[n:])
}

// sumWordsGo is SumWords' pure-Go twin.
func sumWordsGo(x []uint64) uint64 {
	var s uint64
	for _, v := range x {
		s += v
	}
	return s
}
