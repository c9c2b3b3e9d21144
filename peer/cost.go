package peer

import (
	"sync"
	"time"
)

// Initial guesses of a transfer's cost, before any fetch was measured: a LAN round trip with a
// Redis lookup and a connection to set up, and a gigabit link's throughput (a loopback or a
// faster network is learnt from the first fetch on).
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
	large      int     // fetches large enough to have measured the throughput
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
// beyond the latency (at most half of it).
func (e *estimator) observe(bytes int64, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	const a = 0.3 // weight of the newest measurement
	sec := d.Seconds()
	if bytes < 64<<10 {
		e.latency += a * (sec - e.latency)
		return
	}
	tp := float64(bytes) / (sec - min(e.latency, sec/2))
	if e.large++; e.large == 1 {
		e.throughput = tp
		return
	}
	e.throughput += a * (tp - e.throughput)
}
