package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ubatch/engine"
)

// Metrics records the engine's scheduling events and the server's per-request figures as
// Prometheus metrics named ubatch_*. It implements engine.Observer: pass it as
// engine.Config.Observer and as server.Config.Metrics. Its methods never block for long.
type Metrics struct {
	tiers             *tierMetrics
	batchUtilization  prometheus.Histogram
	stepDuration      prometheus.Histogram
	kvUsage           prometheus.Gauge
	kvBlocks          *prometheus.GaugeVec
	prefixHitTokens   prometheus.Counter
	promptTokens      prometheus.Counter
	prefixHitRatio    prometheus.Gauge
	generationTokens  prometheus.Counter
	timePerOutput     prometheus.Histogram
	queueWait         prometheus.Histogram
	timeToFirstToken  prometheus.Histogram
	interTokenLatency prometheus.Histogram
	requests          *prometheus.CounterVec
	running           prometheus.Gauge
	waiting           prometheus.Gauge
	preemptions       prometheus.Counter
	rejected          prometheus.Counter
	lookupTokens      prometheus.Counter
	lookupHitTokens   prometheus.Counter
	promptComputed    prometheus.Counter
	requestLatency    prometheus.Histogram
	requestPreempted  prometheus.Histogram
	stepBudget        prometheus.Gauge
	stepTarget        prometheus.Gauge
	stepPredicted     prometheus.Gauge
	stepReasons       *prometheus.CounterVec
	panics            *prometheus.CounterVec
	runningBound      prometheus.Gauge
	admitStop         *prometheus.GaugeVec   // 1 for the latest step's reason, 0 for the others
	admitStops        *prometheus.CounterVec // steps by that reason

	// Running totals behind the hit-ratio gauge (a counter's value cannot be read back).
	mu             sync.Mutex
	hitTotal       float64
	promptTotal    float64
	kvUsedGauge    prometheus.Gauge
	kvCachedGauge  prometheus.Gauge
	kvFreeGauge    prometheus.Gauge
	finishCounters map[engine.FinishReason]prometheus.Counter
}

// latencyBuckets span 1 ms to about 65 s, doubling.
func latencyBuckets() []float64 { return prometheus.ExponentialBuckets(0.001, 2, 17) }

// utilizationBuckets are 0.1, 0.2, ..., 1 written as decimals (LinearBuckets accumulates
// 0.30000000000000004), so a full step lands in le="1", not only in +Inf.
func utilizationBuckets() []float64 {
	b := make([]float64, 10)
	for i := range b {
		b[i] = float64(i+1) / 10
	}
	return b
}

// budgetReasons are the label values of ubatch_steps_total, present from the start.
var budgetReasons = []engine.BudgetReason{engine.BudgetNoDecode, engine.BudgetFixed, engine.BudgetLearning,
	engine.BudgetTarget, engine.BudgetQueue, engine.BudgetFloor, engine.BudgetBatchSize}

// admitReasons are the label values of ubatch_admission_stop and ubatch_admission_stops_total.
var admitReasons = []engine.AdmitReason{engine.AdmitQueueEmpty, engine.AdmitSlots, engine.AdmitKV, engine.AdmitITL, engine.AdmitPrefix}

// NewMetrics creates the metrics and registers them with reg (nil: not registered, e.g. in
// tests that read them directly). It panics if a metric of the same name is already registered
// there, as prometheus.MustRegister does.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &Metrics{
		batchUtilization: hist("ubatch_batch_utilization_ratio",
			"Per engine step, the tokens its forward pass carried over the most it could have carried given the work waiting: "+
				"the token budget when prompts waited, the running bound (ubatch_sequences_running_bound, at most -np) when every "+
				"running sequence decoded and nothing waited (all slots decoding read 1, one client alone 1/bound; a free slot counts "+
				"nothing while the KV cache or the inter-token target stops admission). Observed only on steps that ran: an idle node adds no samples.",
			utilizationBuckets()),
		stepDuration: hist("ubatch_step_duration_seconds",
			"Duration of one engine step's forward pass.", prometheus.ExponentialBuckets(0.0001, 2, 18)),
		kvUsage: gauge("ubatch_kv_cache_usage_ratio",
			"Fraction of KV-cache blocks referenced by running sequences."),
		kvBlocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ubatch_kv_cache_blocks",
			Help: "KV-cache blocks by state: used (held by sequences), cached (kept only for prefix reuse), free."},
			[]string{"state"}),
		prefixHitTokens: counter("ubatch_prefix_cache_hit_tokens_total",
			"Prompt tokens served from the prefix cache instead of being computed."),
		promptTokens: counter("ubatch_prompt_tokens_total", "Prompt tokens of admitted requests."),
		prefixHitRatio: gauge("ubatch_prefix_cache_hit_ratio",
			"Prefix-cache hit tokens divided by prompt tokens, since the start."),
		generationTokens: counter("ubatch_generation_tokens_total", "Tokens generated by finished requests."),
		timePerOutput: hist("ubatch_time_per_output_token_seconds",
			"Per sequence, the mean time between output tokens after the first.", latencyBuckets()),
		queueWait: hist("ubatch_queue_wait_seconds",
			"Time from submission to admission into the running batch.", latencyBuckets()),
		timeToFirstToken: hist("ubatch_time_to_first_token_seconds",
			"Time from submission to the first generated token.", latencyBuckets()),
		interTokenLatency: hist("ubatch_inter_token_latency_seconds",
			"Time between consecutive generated tokens of a sequence.", latencyBuckets()),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ubatch_requests_total",
			Help: "Finished engine requests (sequences) by finish reason."}, []string{"finish_reason"}),
		running:     gauge("ubatch_sequences_running", "Sequences in the running batch."),
		waiting:     gauge("ubatch_sequences_waiting", "Requests waiting for admission."),
		preemptions: counter("ubatch_preemptions_total", "Sequences preempted (KV blocks freed, recomputed later)."),
		rejected:    counter("ubatch_requests_rejected_total", "Requests rejected because the queue was full."),
		lookupTokens: counter("ubatch_prefix_cache_lookup_tokens_total",
			"Tokens looked up in the prefix cache at admission, re-admissions after preemption included; "+
				"rate(ubatch_prefix_cache_lookup_hit_tokens_total) / rate(this) is the hit ratio."),
		lookupHitTokens: counter("ubatch_prefix_cache_lookup_hit_tokens_total",
			"Of ubatch_prefix_cache_lookup_tokens_total, the tokens found in the prefix cache."),
		promptComputed: counter("ubatch_prompt_tokens_computed_total",
			"Prompt tokens run through the model (cached ones excluded); its rate is prompt tokens/s."),
		requestLatency: hist("ubatch_request_latency_seconds",
			"End-to-end time of an engine request, from submission to its final event.", latencyBuckets()),
		requestPreempted: hist("ubatch_request_preemptions",
			"Times each finished request was preempted (its KV blocks freed and recomputed later).",
			[]float64{0, 1, 2, 4, 8, 16}),
		stepBudget: gauge("ubatch_step_token_budget",
			"Token budget of the latest step (decode tokens plus the prompt tokens allowed); see ubatch_steps_total for why."),
		stepTarget: gauge("ubatch_step_target_seconds",
			"Step-time target in force at the latest step (the inter-token target, relaxed while requests wait); 0 when none applied."),
		stepPredicted: gauge("ubatch_step_predicted_seconds",
			"The step cost model's time for the latest step's batch (0 until the model is fitted)."),
		stepReasons: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ubatch_steps_total",
			Help: "Engine steps by what set their token budget: no_decode (whole --batch-size), fixed (no target), " +
				"learning (cost model not fitted), target, queue (target relaxed: requests wait), floor (decode alone " +
				"reaches the target), batch_size (the target allows more)."}, []string{"budget_reason"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ubatch_panics_total",
			Help: "Panics recovered, each failing one request (a bug; the log has the stack under the error id): " +
				"where=engine in a request's sampling or grammar, where=handler in an HTTP handler."}, []string{"where"}),
		runningBound: gauge("ubatch_sequences_running_bound",
			"The running set's current bound (at most -np): as many sequences as the KV cache holds at the mean sequence "+
				"length of finished requests and the inter-token target allows at that length; -np until a request finished."),
		admitStop: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ubatch_admission_stop",
			Help: "1 for what stopped the latest step's admission, 0 for the others: queue_empty (all admitted), slots (-np " +
				"reached), kv (the KV cache: the bound at the mean length, or the next request's prompt and growth), itl (one more " +
				"decoding sequence would pass --target-itl), prefix (the rest wait for a prefix being computed)."}, []string{"reason"}),
		admitStops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ubatch_admission_stops_total",
			Help: "Engine steps by what stopped their admission (see ubatch_admission_stop)."}, []string{"reason"}),
	}
	for _, r := range admitReasons {
		m.admitStop.WithLabelValues(string(r))
		m.admitStops.WithLabelValues(string(r))
	}
	m.panics.WithLabelValues("engine")
	m.panics.WithLabelValues("handler")
	for _, r := range budgetReasons {
		m.stepReasons.WithLabelValues(string(r))
	}
	m.kvUsedGauge = m.kvBlocks.WithLabelValues("used")
	m.kvCachedGauge = m.kvBlocks.WithLabelValues("cached")
	m.kvFreeGauge = m.kvBlocks.WithLabelValues("free")
	m.finishCounters = map[engine.FinishReason]prometheus.Counter{}
	for _, r := range []engine.FinishReason{engine.FinishStop, engine.FinishLength, engine.FinishCancelled, engine.FinishError} {
		// Present from the start, so that rates over them work before the first such request.
		m.finishCounters[r] = m.requests.WithLabelValues(string(r))
	}
	if reg != nil {
		reg.MustRegister(m.batchUtilization, m.stepDuration, m.kvUsage, m.kvBlocks, m.prefixHitTokens,
			m.promptTokens, m.prefixHitRatio, m.generationTokens, m.timePerOutput, m.queueWait,
			m.timeToFirstToken, m.interTokenLatency, m.requests, m.running, m.waiting, m.preemptions, m.rejected,
			m.lookupTokens, m.lookupHitTokens, m.promptComputed, m.requestLatency, m.requestPreempted,
			m.stepBudget, m.stepTarget, m.stepPredicted, m.stepReasons, m.panics, m.runningBound, m.admitStop, m.admitStops)
	}
	m.tiers = newTierMetrics(reg) // metrics_tier.go
	return m
}

var _ engine.Observer = (*Metrics)(nil)

// Step implements engine.Observer.
func (m *Metrics) Step(info engine.StepInfo) {
	if info.Capacity > 0 { // a step that ran; engine.StepInfo.Capacity defines the ratio
		m.batchUtilization.Observe(info.Utilization())
	}
	m.stepDuration.Observe(info.Duration.Seconds())
	m.promptComputed.Add(float64(info.PrefillTokens))
	m.stepBudget.Set(float64(info.Budget))
	m.stepTarget.Set(info.Target.Seconds())
	m.stepPredicted.Set(info.Predicted.Seconds())
	m.stepReasons.WithLabelValues(string(info.Reason)).Inc()
	m.running.Set(float64(info.Running))
	m.waiting.Set(float64(info.Waiting))
	m.setKV(info.KVUsed, info.KVCached, info.KVTotal)
	m.setAdmission(info.Bound, info.AdmitStop)
	if info.AdmitStop != "" {
		m.admitStops.WithLabelValues(string(info.AdmitStop)).Inc()
	}
}

// setAdmission sets the running bound and the one admission-stop reason that is 1.
func (m *Metrics) setAdmission(bound int, stop engine.AdmitReason) {
	if bound > 0 {
		m.runningBound.Set(float64(bound))
	}
	if stop == "" {
		return
	}
	for _, r := range admitReasons {
		v := 0.0
		if r == stop {
			v = 1
		}
		m.admitStop.WithLabelValues(string(r)).Set(v)
	}
}

// ObserveStats refreshes the gauges from an engine snapshot; the server calls it before each
// scrape because an idle engine reports no steps.
func (m *Metrics) ObserveStats(st engine.Stats) {
	m.running.Set(float64(st.Running))
	m.waiting.Set(float64(st.Waiting))
	m.setKV(st.KV.Used, st.KV.Cached, st.KV.Total)
	m.setAdmission(st.Bound, st.AdmitStop)
}

func (m *Metrics) setKV(used, cached, total int) {
	if total > 0 {
		m.kvUsage.Set(float64(used) / float64(total))
	}
	m.kvUsedGauge.Set(float64(used))
	m.kvCachedGauge.Set(float64(cached))
	m.kvFreeGauge.Set(float64(max(total-used-cached, 0)))
}

// Admitted implements engine.Observer.
func (m *Metrics) Admitted(queueWait time.Duration, promptTokens, cachedTokens int) {
	m.queueWait.Observe(queueWait.Seconds())
	m.promptTokens.Add(float64(promptTokens))
	m.prefixHitTokens.Add(float64(cachedTokens))
	m.mu.Lock()
	m.hitTotal += float64(cachedTokens)
	m.promptTotal += float64(promptTokens)
	if m.promptTotal > 0 {
		m.prefixHitRatio.Set(m.hitTotal / m.promptTotal)
	}
	m.mu.Unlock()
}

// Lookup implements engine.Observer.
func (m *Metrics) Lookup(tokens, cached int) {
	m.lookupTokens.Add(float64(tokens))
	m.lookupHitTokens.Add(float64(cached))
}

// Token implements engine.Observer.
func (m *Metrics) Token(first bool, sinceLast time.Duration) {
	if first {
		m.timeToFirstToken.Observe(sinceLast.Seconds())
		return
	}
	m.interTokenLatency.Observe(sinceLast.Seconds())
}

// Finished implements engine.Observer.
func (m *Metrics) Finished(reason engine.FinishReason, u engine.Usage) {
	c, ok := m.finishCounters[reason]
	if !ok {
		c = m.requests.WithLabelValues(string(reason))
	}
	c.Inc()
	m.generationTokens.Add(float64(u.CompletionTokens))
	m.requestLatency.Observe(u.Latency.Seconds())
	m.requestPreempted.Observe(float64(u.Preemptions))
}

// Preempted implements engine.Observer.
func (m *Metrics) Preempted() { m.preemptions.Inc() }

// Rejected implements engine.Observer.
func (m *Metrics) Rejected() { m.rejected.Inc() }

var _ engine.PanicObserver = (*Metrics)(nil)

// Panicked implements engine.PanicObserver: a panic the engine recovered.
func (m *Metrics) Panicked() { m.panics.WithLabelValues("engine").Inc() }

// handlerPanicked counts a panic recovered from an HTTP handler.
func (m *Metrics) handlerPanicked() { m.panics.WithLabelValues("handler").Inc() }

func (m *Metrics) observeTimePerOutputToken(d time.Duration) { m.timePerOutput.Observe(d.Seconds()) }
