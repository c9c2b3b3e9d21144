package peer

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ubatch/internal/metric"
)

// Failure reasons of a fetch (ubatch_peer_fetch_failures_total's reason label).
const (
	ReasonRedis    = "redis"    // the fleet lookup failed
	ReasonDown     = "down"     // connection refused or reset
	ReasonTimeout  = "timeout"  // past the fetch's deadline
	ReasonStatus   = "status"   // the peer answered an error status (404: evicted meanwhile)
	ReasonIdentity = "identity" // another model, KV type or block size
	ReasonCorrupt  = "corrupt"  // malformed answer or a bad checksum
	ReasonTokens   = "tokens"   // blocks of other tokens
	ReasonTooLarge = "too_large"
	ReasonImport   = "import" // the local cache could not take them
)

var reasons = []string{ReasonRedis, ReasonDown, ReasonTimeout, ReasonStatus, ReasonIdentity, ReasonCorrupt, ReasonTokens,
	ReasonTooLarge, ReasonImport}

// Metrics are the peer tier's Prometheus metrics. A nil *Metrics counts nothing.
type Metrics struct {
	fetches       prometheus.Counter
	failures      *prometheus.CounterVec
	fetchedBlocks prometheus.Counter
	fetchedBytes  prometheus.Counter
	latency       prometheus.Histogram
	serveReqs     *prometheus.CounterVec
	servedBlocks  prometheus.Counter
	servedBytes   prometheus.Counter
}

// NewMetrics makes the metrics and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		fetches: metric.Counter("ubatch_peer_fetches_total",
			"KV block fetches from peers attempted (the transfer was expected to beat recomputing)."),
		failures: metric.CounterVec("ubatch_peer_fetch_failures_total",
			"Peer fetches that failed, by reason; the prompt was computed instead.", "reason"),
		fetchedBlocks: metric.Counter("ubatch_peer_fetched_blocks_total",
			"KV blocks fetched from peers."),
		fetchedBytes: metric.Counter("ubatch_peer_fetched_bytes_total",
			"Bytes of KV block answers read from peers."),
		latency: metric.Histogram("ubatch_peer_fetch_seconds",
			"Time of a peer fetch, request to verified blocks (failures included).",
			[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}),
		serveReqs: metric.CounterVec("ubatch_peer_serve_requests_total",
			"POST /kv/blocks requests answered, by status code.", "code"),
		servedBlocks: metric.Counter("ubatch_peer_served_blocks_total",
			"KV blocks sent to peers."),
		servedBytes: metric.Counter("ubatch_peer_served_bytes_total",
			"Bytes of KV blocks sent to peers."),
	}
	for _, r := range reasons {
		m.failures.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.fetches, m.failures, m.fetchedBlocks, m.fetchedBytes, m.latency,
			m.serveReqs, m.servedBlocks, m.servedBytes)
	}
	return m
}

func (m *Metrics) served(code, blocks int, bytes int64) {
	if m == nil {
		return
	}
	m.serveReqs.WithLabelValues(strconv.Itoa(code)).Inc()
	m.servedBlocks.Add(float64(blocks))
	m.servedBytes.Add(float64(bytes))
}

func (m *Metrics) fetched(d time.Duration, blocks int, bytes int64, reason string) {
	if m == nil {
		return
	}
	m.fetches.Inc()
	m.latency.Observe(d.Seconds())
	if reason != "" {
		m.failures.WithLabelValues(reason).Inc()
	}
	m.fetchedBlocks.Add(float64(blocks))
	m.fetchedBytes.Add(float64(bytes))
}

func (m *Metrics) fail(reason string) {
	if m != nil {
		m.failures.WithLabelValues(reason).Inc()
	}
}
