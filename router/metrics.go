package router

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"ubatch/internal/metric"
)

// Decision reasons, the values of ubatch_route_decisions_total's reason label.
const (
	ReasonPrefix      = "prefix"       // the node holding the longest cached prefix won
	ReasonLoad        = "load"         // a node held a longer prefix, but load outweighed it
	ReasonPeer        = "peer"         // as load, to a node that fetches the prefix from a peer (Config.PeerCredit)
	ReasonLeastLoaded = "least_loaded" // no node holds any of the prompt: the least loaded one
	ReasonNoPrompt    = "no_prompt"    // a route without a prompt (models, tokenize): least loaded
)

// metrics are the router's Prometheus metrics, all named ubatch_route_*.
type metrics struct {
	decisions      *prometheus.CounterVec
	promptTokens   prometheus.Counter
	expectedCached prometheus.Counter
	reportedPrompt prometheus.Counter
	reportedCached prometheus.Counter
	mismatch       prometheus.Counter
	ttfb           *prometheus.HistogramVec
	duration       *prometheus.HistogramVec
	retries        *prometheus.CounterVec
	failures       *prometheus.CounterVec
	ejections      *prometheus.CounterVec
	streamErrors   *prometheus.CounterVec
	rejected       *prometheus.CounterVec
	healthy        *prometheus.GaugeVec
	inflight       *prometheus.GaugeVec
	redisErrors    prometheus.Counter
	lookup         prometheus.Histogram
	unknownNodes   prometheus.Gauge
	parses         *prometheus.CounterVec
	deaths         *prometheus.CounterVec

	mu             sync.Mutex
	prompt, cached float64
	hitRatio       prometheus.Gauge
}

func latencyBuckets() []float64 { return prometheus.ExponentialBuckets(0.001, 2, 17) }

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: metric.CounterVec("ubatch_route_decisions_total",
			"Routing decisions by chosen node and reason (prefix, load, peer, least_loaded, no_prompt).", "node", "reason"),
		promptTokens: metric.Counter("ubatch_route_prompt_tokens_total", "Prompt tokens of routed requests (the router's tokenization)."),
		expectedCached: metric.Counter("ubatch_route_expected_cached_tokens_total",
			"Prompt tokens the chosen node held in its prefix cache according to the index, at decision time."),
		reportedPrompt: metric.Counter("ubatch_route_reported_prompt_tokens_total",
			"Prompt tokens in the usage objects nodes returned (responses that carry usage)."),
		reportedCached: metric.Counter("ubatch_route_reported_cached_tokens_total",
			"Cached prompt tokens (prompt_tokens_details.cached_tokens) in the usage objects nodes returned."),
		mismatch: metric.Counter("ubatch_route_prompt_mismatch_total",
			"Responses whose usage.prompt_tokens differs from the router's tokenization (the routing hash then misses)."),
		ttfb: metric.HistogramVec("ubatch_route_upstream_ttfb_seconds",
			"Per node, time from forwarding a request to its first response byte.", latencyBuckets(), "node"),
		duration: metric.HistogramVec("ubatch_route_upstream_duration_seconds",
			"Per node, time from forwarding a request to the end of its response.", latencyBuckets(), "node"),
		retries: metric.CounterVec("ubatch_route_retries_total", "Requests sent again to another node after a failure of the node's before the first byte, by failure.", "reason"),
		failures: metric.CounterVec("ubatch_route_node_failures_total",
			"Node failures seen by the router (connect, died, status_5xx, garbage, timeout, health, mid_stream; not counted towards --fall: verdict_5xx, a node's well-formed 5xx answer to the request, and health_busy, a late health check while the node serves this router's requests).", "node", "kind"),
		ejections: metric.CounterVec("ubatch_route_node_ejections_total",
			"Times a node was taken out of rotation, by cause: requests (--fall failed requests in a row) or health (--fall failed health checks in a row).",
			"node", "cause"),
		streamErrors: metric.CounterVec("ubatch_route_stream_errors_total", "Streams a node broke after the first byte (ended with an error event).", "node"),
		rejected:     metric.CounterVec("ubatch_route_rejected_total", "Requests the router answered itself (too_large, no_node, bad_request, response_too_large, context_length, quarantined).", "reason"),
		healthy: metric.GaugeVec("ubatch_route_node_healthy",
			"1 when the node is in rotation, 0 when taken out.", "node"),
		inflight: metric.GaugeVec("ubatch_route_node_inflight",
			"Requests this router has in flight on each node.", "node"),
		redisErrors: metric.Counter("ubatch_route_redis_errors_total", "Failed index reads (routing falls back to load and local affinity)."),
		lookup: metric.Histogram("ubatch_route_index_lookup_seconds",
			"Time of one prefix lookup in Redis.", prometheus.ExponentialBuckets(0.0001, 2, 16)),
		unknownNodes: metric.Gauge("ubatch_route_unknown_nodes",
			"Nodes in Redis that are not in --nodes (ignored)."),
		parses: metric.CounterVec("ubatch_route_parse_total",
			"Prompts of completion and chat requests by how the router read them: whole, prefix (its leading --prefix-bytes only) "+
				"or over_budget (--parse-budget full: routed by load, unparsed).", "outcome"),
		deaths: metric.CounterVec("ubatch_route_node_deaths_total",
			"Requests whose node's connection broke while serving them (reset or EOF before the response ended), the query-of-death guard's evidence.", "node"),
		hitRatio: metric.Gauge("ubatch_route_prefix_hit_ratio",
			"Cache-aware hit rate since the start: expected cached prompt tokens of the chosen nodes over prompt tokens."),
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.promptTokens, m.expectedCached, m.reportedPrompt, m.reportedCached, m.mismatch,
			m.ttfb, m.duration, m.retries, m.failures, m.ejections, m.streamErrors, m.rejected, m.healthy, m.inflight,
			m.redisErrors, m.lookup, m.unknownNodes, m.parses, m.deaths, m.hitRatio)
	}
	for _, r := range []string{"too_large", "no_node", "bad_request", "response_too_large", "context_length", "quarantined"} {
		m.rejected.WithLabelValues(r)
	}
	for _, o := range []string{"whole", "prefix", "over_budget"} {
		m.parses.WithLabelValues(o)
	}
	for _, r := range []string{"connect", "died", "status_5xx", "status_503_busy", "status_429", "garbage", "timeout"} {
		m.retries.WithLabelValues(r)
	}
	return m
}

// routed records a decision for a prompt of n tokens of which cached were in the node's cache.
func (m *metrics) routed(node, reason string, n, cached int) {
	m.decisions.WithLabelValues(node, reason).Inc()
	if n == 0 {
		return
	}
	m.promptTokens.Add(float64(n))
	m.expectedCached.Add(float64(cached))
	m.mu.Lock()
	m.prompt += float64(n)
	m.cached += float64(cached)
	m.hitRatio.Set(m.cached / m.prompt)
	m.mu.Unlock()
}
