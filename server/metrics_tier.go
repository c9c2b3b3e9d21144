package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ubatch/internal/metric"

	"ubatch/engine"
	"ubatch/kvdisk"
)

// tierMetrics counts the KV tiers' traffic as the engine sees it (engine.TierObserver, through
// Metrics): blocks and bytes brought back into RAM per tier, the fetches' latency, swap-ins and
// swap-outs.
type tierMetrics struct {
	fetchedBlocks, fetchedBytes *prometheus.CounterVec
	fetchSeconds                *prometheus.HistogramVec
	swapIns                     *prometheus.CounterVec
	swapOuts                    prometheus.Counter
}

var _ engine.TierObserver = (*Metrics)(nil)

// newTierMetrics makes the tier metrics, registered on reg unless it is nil.
func newTierMetrics(reg prometheus.Registerer) *tierMetrics {
	m := &tierMetrics{
		fetchedBlocks: metric.CounterVec("ubatch_kv_tier_hit_blocks_total",
			"KV blocks read back into RAM from a tier (disk, peer) instead of recomputed", "tier"),
		fetchedBytes: metric.CounterVec("ubatch_kv_tier_hit_bytes_total",
			"bytes of K/V read back into RAM from a tier", "tier"),
		fetchSeconds: metric.HistogramVec("ubatch_kv_tier_read_seconds",
			"time of one fetch of a prefix's blocks from a tier", latencyBuckets(), "tier"),
		swapIns: metric.CounterVec("ubatch_kv_tier_swap_ins_total",
			"fetches that brought a preempted sequence's blocks back (n_kv_swap)", "tier"),
		swapOuts: metric.Counter("ubatch_kv_tier_swap_out_blocks_total",
			"blocks of preempted sequences handed to the disk tier because a read is cheaper than a recompute"),
	}
	if reg != nil {
		reg.MustRegister(m.fetchedBlocks, m.fetchedBytes, m.fetchSeconds, m.swapIns, m.swapOuts)
	}
	return m
}

// TierFetched implements engine.TierObserver.
func (mm *Metrics) TierFetched(tier string, blocks int, bytes int64, took time.Duration, swapIn bool) {
	m := mm.tiers
	m.fetchedBlocks.WithLabelValues(tier).Add(float64(blocks))
	m.fetchedBytes.WithLabelValues(tier).Add(float64(bytes))
	m.fetchSeconds.WithLabelValues(tier).Observe(took.Seconds())
	if swapIn {
		m.swapIns.WithLabelValues(tier).Inc()
	}
}

// TierSwappedOut implements engine.TierObserver.
func (m *Metrics) TierSwappedOut(blocks int) { m.tiers.swapOuts.Add(float64(blocks)) }

// TierFetched implements engine.TierObserver for the observers that do.
func (obs Observers) TierFetched(tier string, blocks int, bytes int64, took time.Duration, swapIn bool) {
	for _, o := range obs {
		if t, ok := o.(engine.TierObserver); ok {
			t.TierFetched(tier, blocks, bytes, took, swapIn)
		}
	}
}

// TierSwappedOut implements engine.TierObserver for the observers that do.
func (obs Observers) TierSwappedOut(blocks int) {
	for _, o := range obs {
		if t, ok := o.(engine.TierObserver); ok {
			t.TierSwappedOut(blocks)
		}
	}
}

// RegisterDiskTier exposes the disk tier's own counters on reg, read at each scrape:
// ubatch_kv_disk_blocks and _bytes (what it holds), and the totals of its writes, written
// bytes, dropped writes (queue full), evictions, rejected files, reads and read bytes.
func RegisterDiskTier(reg prometheus.Registerer, stats func() kvdisk.Stats) {
	gauge := func(name, help string, f func(kvdisk.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(stats()) })
	}
	counter := func(name, help string, f func(kvdisk.Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(stats()) })
	}
	reg.MustRegister(
		gauge("ubatch_kv_disk_blocks", "KV blocks held by the disk tier", func(s kvdisk.Stats) float64 { return float64(s.Blocks) }),
		gauge("ubatch_kv_disk_bytes", "bytes of the disk tier's block files", func(s kvdisk.Stats) float64 { return float64(s.Bytes) }),
		counter("ubatch_kv_disk_writes_total", "blocks written to the disk tier", func(s kvdisk.Stats) float64 { return float64(s.Writes) }),
		counter("ubatch_kv_disk_write_bytes_total", "bytes written to the disk tier", func(s kvdisk.Stats) float64 { return float64(s.WriteBytes) }),
		counter("ubatch_kv_disk_dropped_writes_total", "blocks not written because the writer was behind (queue full)", func(s kvdisk.Stats) float64 { return float64(s.Dropped) }),
		counter("ubatch_kv_disk_evictions_total", "blocks removed to stay within --kv-disk-size", func(s kvdisk.Stats) float64 { return float64(s.Evicted) }),
		counter("ubatch_kv_disk_rejected_files_total", "block files rejected (another model, torn, corrupt) and removed", func(s kvdisk.Stats) float64 { return float64(s.Rejected) }),
		counter("ubatch_kv_disk_reads_total", "fetches of blocks from the disk tier", func(s kvdisk.Stats) float64 { return float64(s.Reads) }),
		counter("ubatch_kv_disk_read_bytes_total", "bytes read from the disk tier", func(s kvdisk.Stats) float64 { return float64(s.ReadBytes) }),
		counter("ubatch_kv_disk_swap_out_blocks_total", "blocks of preempted sequences written to the disk tier", func(s kvdisk.Stats) float64 { return float64(s.SwapOuts) }),
	)
}
