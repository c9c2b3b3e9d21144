package peer

import (
	"sync"
	"time"
)

// Initial guesses of a transfer's cost, before any fetch was measured: a LAN round trip with a
// connection to set up, and a gigabit link's throughput (a loopback or a faster network is
// learnt from the first fetch on).
const (
	initialLatency    = 3 * time.Millisecond
	initialThroughput = 100e6 // bytes per second
)

// estimator predicts a fetch's time as latency + bytes/throughput from the fetches measured,
// recent ones weighing most. It is safe for concurrent use.
type estimator struct {
	mu         sync.Mutex
	latency    float64 // seconds
	throughput float64 // bytes per second
	n          int
}

func newEstimator() *estimator {
	return &estimator{latency: initialLatency.Seconds(), throughput: initialThroughput}
}

// estimate is the expected time of a fetch of bytes.
func (e *estimator) estimate(bytes int64) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return time.Duration((e.latency + float64(bytes)/e.throughput) * float64(time.Second))
}

// observe adds a successful fetch of bytes that took d. A fetch too small to tell throughput
// from latency (below 64 KiB) updates the latency; a larger one the throughput, from the time
// beyond the latency.
func (e *estimator) observe(bytes int64, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	const a = 0.3 // weight of the newest measurement
	sec := d.Seconds()
	e.n++
	if bytes < 64<<10 {
		e.latency += a * (sec - e.latency)
		return
	}
	// The latency is at most half of a large fetch's time: what is left is transfer.
	lat := min(e.latency, sec/2)
	tp := float64(bytes) / (sec - lat)
	if e.n == 1 {
		e.throughput = tp
		return
	}
	e.throughput += a * (tp - e.throughput)
}

// decision is whether to fetch: the transfer of bytes is expected to take est; recomputing the
// same tokens rec (known is false while the engine's cost model is not fitted yet, and then the
// fetch goes ahead: it is bounded by the fetch timeout, and a node that has served nothing yet
// has no faster answer). deadline bounds the fetch: past the recompute time, waiting for the
// peer only adds to the prompt's latency.
func decide(est, rec time.Duration, known bool, timeout time.Duration) (fetch bool, deadline time.Duration) {
	if !known {
		return true, timeout
	}
	if est >= rec {
		return false, 0
	}
	return true, min(timeout, max(rec, 2*est))
}
