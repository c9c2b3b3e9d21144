package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"ubatch/engine"
)

// Observers fans engine events out to several observers in order (the engine takes one).
type Observers []engine.Observer

var _ engine.Observer = Observers(nil)

// Step implements engine.Observer.
func (obs Observers) Step(info engine.StepInfo) {
	for _, o := range obs {
		o.Step(info)
	}
}

// Admitted implements engine.Observer.
func (obs Observers) Admitted(queueWait time.Duration, promptTokens, cachedTokens int) {
	for _, o := range obs {
		o.Admitted(queueWait, promptTokens, cachedTokens)
	}
}

// Lookup implements engine.Observer.
func (obs Observers) Lookup(tokens, cached int) {
	for _, o := range obs {
		o.Lookup(tokens, cached)
	}
}

// Token implements engine.Observer.
func (obs Observers) Token(first bool, sinceLast time.Duration) {
	for _, o := range obs {
		o.Token(first, sinceLast)
	}
}

// Finished implements engine.Observer.
func (obs Observers) Finished(reason engine.FinishReason, u engine.Usage) {
	for _, o := range obs {
		o.Finished(reason, u)
	}
}

// Preempted implements engine.Observer.
func (obs Observers) Preempted() {
	for _, o := range obs {
		o.Preempted()
	}
}

// Rejected implements engine.Observer.
func (obs Observers) Rejected() {
	for _, o := range obs {
		o.Rejected()
	}
}

// Ring sizes of the live view: the most recent steps and finished requests it keeps.
const (
	liveSteps    = 64
	liveRequests = 16
)

// LivePollInterval is how often a GET /live client looks for news; events are coalesced to at
// most one per interval.
const LivePollInterval = 200 * time.Millisecond

// Live keeps the latest scheduler activity for the web page's live view (GET /live). It is an
// engine.Observer: each event only updates fixed-size state under a mutex and bumps a sequence
// number, so the engine goroutine never waits on a slow client. Create it with NewLive.
type Live struct {
	mu       sync.Mutex
	seq      uint64 // bumped by every event
	steps    [liveSteps]LiveStep
	nSteps   uint64 // steps observed; steps[(nSteps-1)%liveSteps] is the latest
	reqs     [liveRequests]LiveRequest
	nReqs    uint64
	last     engine.StepInfo // the latest step, for the queue and KV figures
	counts   LiveCounts
	interval time.Duration
	closed   chan struct{} // closed by Close: streams end
	close    sync.Once
	streams  atomic.Int64 // open GET /live streams
}

// DefaultMaxLiveStreams is Config.MaxLiveStreams' default: the live view is for a few people
// watching the server, and each stream costs a connection and a poll every LivePollInterval.
const DefaultMaxLiveStreams = 16

// NewLive returns an empty hub.
func NewLive() *Live { return &Live{interval: LivePollInterval, closed: make(chan struct{})} }

// Close ends every GET /live stream and refuses new ones (503); the observer methods keep working.
// Call it when the server starts shutting down: a stream never ends by itself, so an open page
// would otherwise hold the graceful shutdown for its whole grace period.
func (l *Live) Close() { l.close.Do(func() { close(l.closed) }) }

// LiveStep is one engine step as the live view shows it; durations are in milliseconds.
type LiveStep struct {
	N          uint64  `json:"n"` // step number since the hub started, from 1
	Decode     int     `json:"decode"`
	Prefill    int     `json:"prefill"`
	Budget     int     `json:"budget"`
	Reason     string  `json:"reason"`
	TargetMS   float64 `json:"target_ms"`
	ForwardMS  float64 `json:"forward_ms"`
	StepMS     float64 `json:"step_ms"`
	PredictMS  float64 `json:"predicted_ms"`
	Running    int     `json:"running"`
	Waiting    int     `json:"waiting"`
	KVUsed     int     `json:"kv_used"`
	KVCached   int     `json:"kv_cached"`
	KVTotal    int     `json:"kv_total"`
	UnixMillis int64   `json:"t"`
}

// LiveRequest is one finished request; ITL is the mean gap between its generated tokens.
type LiveRequest struct {
	N           uint64  `json:"n"`
	Finish      string  `json:"finish"`
	Prompt      int     `json:"prompt_tokens"`
	Cached      int     `json:"cached_tokens"`
	Completion  int     `json:"completion_tokens"`
	QueueMS     float64 `json:"queue_ms"`
	TTFTMS      float64 `json:"ttft_ms"`
	ITLMS       float64 `json:"itl_ms"`
	LatencyMS   float64 `json:"latency_ms"`
	Preemptions int     `json:"preemptions"`
}

// LiveCounts are totals since the hub started.
type LiveCounts struct {
	Steps         uint64 `json:"steps"`
	Admitted      uint64 `json:"admitted"`
	Finished      uint64 `json:"finished"`
	Preempted     uint64 `json:"preempted"`
	Rejected      uint64 `json:"rejected"`
	Generated     uint64 `json:"generated"`
	Lookups       uint64 `json:"lookups"`        // prefix-cache lookups (admissions and re-admissions)
	LookupHits    uint64 `json:"lookup_hits"`    // lookups that found at least one cached token
	LookupTokens  uint64 `json:"lookup_tokens"`  // tokens looked up
	LookupCached  uint64 `json:"lookup_cached"`  // of which found in the cache
	PromptTokens  uint64 `json:"prompt_tokens"`  // prompt tokens of first admissions
	PromptCached  uint64 `json:"prompt_cached"`  // of which served from the prefix cache
	PrefillTokens uint64 `json:"prefill_tokens"` // prompt tokens computed by steps
}

// LiveSnapshot is one GET /live event: steps and requests oldest first.
type LiveSnapshot struct {
	Seq      uint64        `json:"seq"`
	Running  int           `json:"running"`
	Waiting  int           `json:"waiting"`
	KVUsed   int           `json:"kv_used"`
	KVCached int           `json:"kv_cached"`
	KVShared int           `json:"kv_shared"`
	KVTotal  int           `json:"kv_total"`
	Counts   LiveCounts    `json:"counts"`
	Steps    []LiveStep    `json:"steps"`
	Requests []LiveRequest `json:"requests"`
}

// Step implements engine.Observer.
func (l *Live) Step(info engine.StepInfo) {
	now := time.Now().UnixMilli()
	l.mu.Lock()
	l.nSteps++
	l.steps[(l.nSteps-1)%liveSteps] = LiveStep{N: l.nSteps, Decode: info.DecodeTokens, Prefill: info.PrefillTokens,
		Budget: info.Budget, Reason: string(info.Reason), TargetMS: Millis(info.Target), ForwardMS: Millis(info.Duration),
		StepMS: Millis(info.Elapsed), PredictMS: Millis(info.Predicted), Running: info.Running, Waiting: info.Waiting,
		KVUsed: info.KVUsed, KVCached: info.KVCached, KVTotal: info.KVTotal, UnixMillis: now}
	l.last = info
	l.counts.Steps++
	l.counts.PrefillTokens += uint64(info.PrefillTokens)
	l.seq++
	l.mu.Unlock()
}

// Admitted implements engine.Observer.
func (l *Live) Admitted(_ time.Duration, promptTokens, cachedTokens int) {
	l.mu.Lock()
	l.counts.Admitted++
	l.counts.PromptTokens += uint64(promptTokens)
	l.counts.PromptCached += uint64(cachedTokens)
	l.seq++
	l.mu.Unlock()
}

// Lookup implements engine.Observer.
func (l *Live) Lookup(tokens, cached int) {
	l.mu.Lock()
	l.counts.Lookups++
	if cached > 0 {
		l.counts.LookupHits++
	}
	l.counts.LookupTokens += uint64(tokens)
	l.counts.LookupCached += uint64(cached)
	l.seq++
	l.mu.Unlock()
}

// Token implements engine.Observer.
func (l *Live) Token(bool, time.Duration) {
	l.mu.Lock()
	l.counts.Generated++
	l.seq++
	l.mu.Unlock()
}

// Finished implements engine.Observer.
func (l *Live) Finished(reason engine.FinishReason, u engine.Usage) {
	r := LiveRequest{Finish: string(reason), Prompt: u.PromptTokens, Cached: u.CachedTokens,
		Completion: u.CompletionTokens, QueueMS: Millis(u.QueueTime), LatencyMS: Millis(u.Latency), Preemptions: u.Preemptions}
	if u.CompletionTokens > 0 {
		r.TTFTMS = Millis(u.TimeToFirstToken)
	}
	if u.CompletionTokens > 1 {
		r.ITLMS = Millis(u.Latency-u.TimeToFirstToken) / float64(u.CompletionTokens-1)
	}
	l.mu.Lock()
	l.nReqs++
	r.N = l.nReqs
	l.reqs[(l.nReqs-1)%liveRequests] = r
	l.counts.Finished++
	l.seq++
	l.mu.Unlock()
}

// Preempted implements engine.Observer.
func (l *Live) Preempted() {
	l.mu.Lock()
	l.counts.Preempted++
	l.seq++
	l.mu.Unlock()
}

// Rejected implements engine.Observer.
func (l *Live) Rejected() {
	l.mu.Lock()
	l.counts.Rejected++
	l.seq++
	l.mu.Unlock()
}

// Seq returns the event sequence number: it changes whenever the hub has news.
func (l *Live) Seq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// Snapshot copies the hub's state; its queue and KV figures are those of the latest step (GET /live
// replaces them with the engine's current statistics) and it has no KVShared, which steps do not report.
func (l *Live) Snapshot() LiveSnapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := LiveSnapshot{Seq: l.seq, Running: l.last.Running, Waiting: l.last.Waiting, KVUsed: l.last.KVUsed,
		KVCached: l.last.KVCached, KVTotal: l.last.KVTotal, Counts: l.counts,
		Steps: ring(l.steps[:], l.nSteps), Requests: ring(l.reqs[:], l.nReqs)}
	return s
}

// ring returns the n items written so far to buf (cyclically), oldest first.
func ring[T any](buf []T, n uint64) []T {
	size := uint64(len(buf))
	out := make([]T, 0, min(n, size))
	for i := n - min(n, size); i < n; i++ {
		out = append(out, buf[i%size])
	}
	return out
}

// handleLive streams the hub's snapshot as server-sent events: one at once, then one whenever
// something changed, looked at every poll interval, until the client goes away or the hub is
// closed. The queue and KV figures come from the engine's own statistics, which are current even
// when it is idle.
//
// Streams are capped by Config.MaxLiveStreams (503 beyond it, at once) and do not count against
// the connection cap (ServeConfig.MaxConnections): that cap counts connections when they are
// accepted, before their route is known, so an admitted stream gives its slot back and the API
// keeps its whole budget however many pages are open; open connections are then at most
// MaxConnections + MaxLiveStreams. The stream's connection closes when it ends (Connection:
// close), as it is no longer counted. It still counts against its client's own cap
// (ServeConfig.MaxConnsPerClient): a client's streams and its other connections share it.
func (s *Server) handleLive(w http.ResponseWriter, r *http.Request) {
	l := s.cfg.Live
	if l == nil {
		WriteError(w, NotFound("the live view is not enabled on this server"))
		return
	}
	select {
	case <-l.closed:
		WriteError(w, &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down",
			Message: "the server is shutting down: the live view is closed"})
		return
	default:
	}
	limit := int64(orDefault(s.cfg.MaxLiveStreams, DefaultMaxLiveStreams))
	if l.streams.Add(1) > limit {
		l.streams.Add(-1)
		// Closing frees the connection's slot at once: a client that keeps the connection of
		// each refused stream open would otherwise fill the connection cap with them.
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "5")
		WriteError(w, &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "too_many_live_streams",
			Message: fmt.Sprintf("the live view has %d streams open, its limit (--max-live-streams): close another page or retry later", limit)})
		return
	}
	defer l.streams.Add(-1)
	leaveConnectionCap(r.Context())
	w.Header().Set("Connection", "close")
	sse := startSSE(w)
	tick := time.NewTicker(l.interval)
	defer tick.Stop()
	sent := ^uint64(0)
	var lastStats engine.Stats
	for {
		st := s.engineStats()
		if seq := l.Seq(); seq != sent || st != lastStats {
			snap := l.Snapshot()
			snap.Running, snap.Waiting = st.Running, st.Waiting
			snap.KVUsed, snap.KVCached, snap.KVShared, snap.KVTotal = st.KV.Used, st.KV.Cached, st.KV.Shared, st.KV.Total
			b, err := json.Marshal(snap)
			if err != nil || sse.raw(b) != nil {
				return
			}
			sent, lastStats = snap.Seq, st
		}
		select {
		case <-r.Context().Done():
			return
		case <-l.closed:
			return
		case <-tick.C:
		}
	}
}
