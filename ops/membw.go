package ops

import (
	"sync"
	"time"
)

// ReadBandwidth measures memory read bandwidth in bytes per second: threads goroutines each
// stream their share of buf (which should be far larger than the last-level cache) through the
// vector dot-product kernel, rounds times, and the fastest round counts.
func ReadBandwidth(buf []float32, threads, rounds int) float64 {
	threads = max(1, threads)
	for i := range buf { // fault every page in before timing
		buf[i] = 1
	}
	best := time.Duration(1<<63 - 1)
	sinks := make([]float32, threads)
	for range max(1, rounds) {
		var wg sync.WaitGroup
		start := time.Now()
		for w := range threads {
			lo, hi := Split(len(buf), threads, 16, w)
			wg.Go(func() { sinks[w] += DotF32(buf[lo:hi], buf[lo:hi]) })
		}
		wg.Wait()
		best = min(best, time.Since(start))
	}
	return float64(4*len(buf)) / best.Seconds()
}
