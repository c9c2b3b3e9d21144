package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes one benchmark run.
type Config struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:8080"; requests go
	// to URL + "/v1/completions". A trailing "/" or "/v1" is accepted.
	URL string
	// Model is sent as "model" when non-empty (vLLM requires it).
	Model string
	// APIKey is sent as "Authorization: Bearer APIKey" when non-empty.
	APIKey string
	// Clients is the number of concurrent closed-loop clients, >= 1.
	Clients int
	// Requests is how many requests to send: the first Requests of the
	// workload, cycling through it again if it is shorter; 0 means the whole
	// workload once.
	Requests int
	// Timeout bounds each request from sending to the end of its stream; a
	// request that exceeds it counts as an error. 0 means no limit.
	Timeout time.Duration
	// Progress, if set, is called after each finished request with the
	// number finished so far and the total. Calls are serialized, so it
	// need not be safe for concurrent use, but it should return quickly.
	Progress func(done, total int)
}

// Result holds the metrics of a run. Requests counts finished requests,
// including the failed ones: Errors (transport errors, non-200 statuses other
// than 429, error events, malformed or truncated streams, timeouts) and
// Rejected (HTTP 429). Requests interrupted by cancelling the run are not
// counted at all. Tokens and latencies come only from successful requests.
type Result struct {
	Requests   int    `json:"requests"`
	Errors     int    `json:"errors"`
	Rejected   int    `json:"rejected"`
	FirstError string `json:"first_error,omitempty"` // of the earliest failed request in workload order

	// Duration is the wall time from the first request sent to the last one
	// finished; in JSON integer nanoseconds.
	Duration           time.Duration `json:"duration_ns"`
	OutputTokens       int           `json:"output_tokens"`
	OutputTokensPerSec float64       `json:"output_tokens_per_sec"`

	// PromptTokens and CachedTokens sum the usage objects of the successful requests that carried
	// one (prompt_tokens, prompt_tokens_details.cached_tokens); PrefixHitRate is their ratio, the
	// fraction of prompt tokens the servers took from their prefix caches (0 without usage).
	PromptTokens  int     `json:"prompt_tokens"`
	CachedTokens  int     `json:"cached_tokens"`
	PrefixHitRate float64 `json:"prefix_hit_rate"`

	// TTFT is the time from sending a request (connecting included, if it
	// needs a new connection) to its first non-empty text chunk, over all
	// requests; TTFTShort and TTFTLong split it by kind.
	TTFT      Percentiles `json:"ttft"`
	TTFTShort Percentiles `json:"ttft_short"`
	TTFTLong  Percentiles `json:"ttft_long"`
	// TTFTFollowUp is the TTFT of chat turns after a conversation's first (which resend its
	// history), and FollowUpPromptTokens and FollowUpCachedTokens their usage's prompt and
	// cached tokens: how much of the history the server found in its cache.
	TTFTFollowUp         Percentiles `json:"ttft_followup"`
	FollowUpPromptTokens int         `json:"followup_prompt_tokens"`
	FollowUpCachedTokens int         `json:"followup_cached_tokens"`
	// InterToken pools the gaps between consecutive non-empty text chunks
	// after the first, over all requests.
	InterToken Percentiles `json:"inter_token"`
}

// Run sends cfg.Requests requests taken in order from reqs (see
// Config.Requests) with cfg.Clients concurrent clients, each starting the next
// unsent request as soon as its previous one ends, and summarizes them.
//
// Each request is a POST of {"prompt", "max_tokens", "stream": true,
// "temperature": 0, "ignore_eos": true, "stream_options":
// {"include_usage": true}} (plus "model" if set) to /v1/completions. A
// request's output tokens are the completion_tokens of the last "usage"
// object in its stream if the server sends one, else its number of non-empty
// text chunks.
//
// Run returns an error for an invalid cfg or empty reqs. If ctx is cancelled
// before the run is over it stops all clients, aborting their requests, and
// returns the metrics of the requests that finished together with
// ctx.Err(). Run leaves no goroutines or idle connections behind.
func Run(ctx context.Context, cfg Config, reqs []Request) (Result, error) {
	endpoint, err := cfg.validate(reqs)
	if err != nil {
		return Result{}, err
	}
	total := cfg.Requests
	if total == 0 {
		total = len(reqs)
	}
	workers := min(cfg.Clients, total)

	transport := newTransport(workers)
	defer transport.CloseIdleConnections()
	c := &client{
		http:     &http.Client{Transport: transport},
		endpoint: endpoint,
		chat:     strings.TrimSuffix(endpoint, "completions") + "chat/completions",
		model:    cfg.Model,
		apiKey:   cfg.APIKey,
		timeout:  cfg.Timeout,
	}

	outcomes := make([]outcome, total)
	var (
		next     atomic.Int64
		progress sync.Mutex
		done     int
		wg       sync.WaitGroup
	)
	start := time.Now()
	finished := func() {
		progress.Lock()
		done++
		if cfg.Progress != nil {
			cfg.Progress(done, total)
		}
		progress.Unlock()
	}
	if groups, ok := conversations(reqs, total); ok {
		c.runConversations(ctx, workers, reqs, groups, outcomes, finished)
	}
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				if reqs[i%len(reqs)].Conversation > 0 {
					continue // run above, as part of its conversation
				}
				outcomes[i] = c.do(ctx, reqs[i%len(reqs)], nil)
				if outcomes[i].status == statusCancelled {
					return
				}
				finished()
			}
		})
	}
	wg.Wait()
	res := summarize(outcomes, time.Since(start))
	// A cancel that came after the last request finished spoils nothing.
	for _, o := range outcomes {
		if o.status == statusNotRun || o.status == statusCancelled {
			return res, ctx.Err()
		}
	}
	return res, nil
}

// validate checks cfg and reqs and returns the completions endpoint.
func (cfg Config) validate(reqs []Request) (string, error) {
	if len(reqs) == 0 {
		return "", errors.New("loadgen: no requests")
	}
	for i, r := range reqs {
		if err := r.validate(); err != nil {
			return "", fmt.Errorf("loadgen: request %d: %w", i, err)
		}
	}
	if cfg.Clients < 1 {
		return "", fmt.Errorf("loadgen: clients = %d, want >= 1", cfg.Clients)
	}
	if cfg.Requests < 0 {
		return "", fmt.Errorf("loadgen: requests = %d, want >= 0", cfg.Requests)
	}
	if cfg.Timeout < 0 {
		return "", fmt.Errorf("loadgen: timeout = %v, want >= 0", cfg.Timeout)
	}
	return completionsURL(cfg.URL)
}

// completionsURL turns a base URL into the /v1/completions endpoint.
func completionsURL(base string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil {
		return "", fmt.Errorf("loadgen: server URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("loadgen: server URL %q: want http:// or https://", base)
	}
	if u.Host == "" {
		return "", fmt.Errorf("loadgen: server URL %q has no host", base)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("loadgen: server URL %q: want no query or fragment", base)
	}
	p := strings.TrimSuffix(u.Path, "/")
	p = strings.TrimSuffix(p, "/v1")
	u.Path = p + "/v1/completions"
	u.RawPath = ""
	return u.String(), nil
}

// newTransport keeps one idle connection per client so that back-to-back
// requests reuse them, and disables compression: a gzipped event stream
// would be buffered by the decompressor and distort the chunk timings.
func newTransport(clients int) *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        clients,
		MaxIdleConnsPerHost: clients,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableCompression:  true,
	}
}

// summarize aggregates the outcomes of a run that took wall time d.
func summarize(outcomes []outcome, d time.Duration) Result {
	res := Result{Duration: d}
	var ttft, short, long, follow, gaps []time.Duration
	for _, o := range outcomes {
		switch o.status {
		case statusNotRun, statusCancelled:
			continue
		case statusRejected:
			res.Rejected++
		case statusFailed:
			res.Errors++
			if res.FirstError == "" {
				res.FirstError = o.err
			}
		case statusOK:
			res.OutputTokens += o.tokens
			if o.prompt >= 0 {
				res.PromptTokens += o.prompt
				res.CachedTokens += max(o.cached, 0)
				if o.turn > 1 {
					res.FollowUpPromptTokens += o.prompt
					res.FollowUpCachedTokens += max(o.cached, 0)
				}
			}
			if o.hasTTFT && o.turn > 1 {
				follow = append(follow, o.ttft)
			}
			if o.hasTTFT {
				ttft = append(ttft, o.ttft)
				if o.kind == KindLong {
					long = append(long, o.ttft)
				} else {
					short = append(short, o.ttft)
				}
			}
			gaps = append(gaps, o.gaps...)
		}
		res.Requests++
	}
	if d > 0 {
		res.OutputTokensPerSec = float64(res.OutputTokens) / d.Seconds()
	}
	if res.PromptTokens > 0 {
		res.PrefixHitRate = float64(res.CachedTokens) / float64(res.PromptTokens)
	}
	res.TTFT = computePercentiles(ttft)
	res.TTFTShort = computePercentiles(short)
	res.TTFTLong = computePercentiles(long)
	res.TTFTFollowUp = computePercentiles(follow)
	res.InterToken = computePercentiles(gaps)
	return res
}
