package loadgen

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunTimings(t *testing.T) {
	f := newFake()
	f.shortTTFT, f.longTTFT, f.gap = 50*time.Millisecond, 200*time.Millisecond, 20*time.Millisecond
	srv := f.start(t)
	work := reqs(16, "long", "ok", "ok", "ok", "long", "ok", "ok", "ok")
	// On a machine shared with parallel builds and tests, the fake's sleeps
	// and the client's reads can both be late by many milliseconds. So the
	// client's figures are compared with the delays the server really
	// produced, and a run that misses the upper bounds is retried; counts
	// and lower bounds must hold on every attempt.
	var late []string
	for attempt := range 4 {
		res, err := Run(context.Background(), Config{URL: srv.URL, Clients: 4}, work)
		if err != nil {
			t.Fatal(err)
		}
		short, long, gaps := f.served()
		late = checkTimings(t, f, res, short, long, gaps)
		if len(late) == 0 {
			return
		}
		t.Logf("attempt %d: %v", attempt, late)
	}
	t.Errorf("latencies off on every attempt: %v", late)
}

// checkTimings fails t on wrong counts or impossible latencies and returns
// the latencies that exceed what the server produced by more than a slack.
// short, long and gaps are the server-side latencies of the same run.
func checkTimings(t *testing.T, f *fakeServer, res Result, short, long, gaps Percentiles) (late []string) {
	t.Helper()
	if res.Requests != 8 || res.Errors != 0 || res.Rejected != 0 || res.FirstError != "" {
		t.Fatalf("counts: %+v", res)
	}
	// No usage sent: one token per non-empty text chunk.
	if want := 8 * f.textChunks; res.OutputTokens != want {
		t.Fatalf("output tokens %d, want %d", res.OutputTokens, want)
	}
	if res.TTFTShort.N != 6 || res.TTFTLong.N != 2 || res.TTFT.N != 8 || short.N != 6 || long.N != 2 {
		t.Fatalf("TTFT sample counts: all %d, short %d (server %d), long %d (server %d)",
			res.TTFT.N, res.TTFTShort.N, short.N, res.TTFTLong.N, long.N)
	}
	// Gaps: textChunks-1 per request; the empty chunks add none.
	if want := 8 * (f.textChunks - 1); res.InterToken.N != want || gaps.N != want {
		t.Fatalf("inter-token samples %d (server %d), want %d", res.InterToken.N, gaps.N, want)
	}
	wantRate := float64(res.OutputTokens) / res.Duration.Seconds()
	if d := res.OutputTokensPerSec - wantRate; d > 1e-6 || d < -1e-6 {
		t.Fatalf("tok/s %v, want %v", res.OutputTokensPerSec, wantRate)
	}
	if short.P50 < f.shortTTFT || long.P50 < f.longTTFT || gaps.P50 < f.gap {
		t.Fatalf("fake server sent early: short %v long %v gaps %v", short.P50, long.P50, gaps.P50)
	}

	const slack = 30 * time.Millisecond
	checks := []struct {
		what       string
		got, serve time.Duration
		lo         time.Duration // hard
	}{
		// Each request's TTFT as the client sees it includes the server's,
		// so every order statistic does too.
		{"short TTFT p50", res.TTFTShort.P50, short.P50, short.P50},
		{"short TTFT p90", res.TTFTShort.P90, short.P90, short.P90},
		{"long TTFT p50", res.TTFTLong.P50, long.P50, long.P50},
		{"long TTFT max", res.TTFTLong.Max, long.Max, long.Max},
		// A chunk read late shortens the next gap, so no such bound for gaps.
		{"inter-token p50", res.InterToken.P50, gaps.P50, gaps.P50 - slack},
		{"inter-token p90", res.InterToken.P90, gaps.P90, gaps.P90 - slack},
	}
	for _, c := range checks {
		if c.got < c.lo {
			t.Fatalf("%s = %v, below the bound %v from the server's %v", c.what, c.got, c.lo, c.serve)
		}
		if c.got > c.serve+slack {
			late = append(late, fmt.Sprintf("%s = %v, server %v", c.what, c.got, c.serve))
		}
	}
	if lo := long.Max + 3*f.gap; res.Duration < lo {
		t.Fatalf("duration %v shorter than the longest request (%v)", res.Duration, lo)
	}
	return late
}

func TestRunUsageCounting(t *testing.T) {
	f := newQuickFake()
	srv := f.start(t)
	tests := []struct {
		name    string
		model   string
		want    int
		prompt  int
		hitRate float64
	}{
		{name: "usage reported", model: "usage", want: 3 * 50, prompt: 3 * 5, hitRate: 0.6},
		{name: "no usage: one per text chunk", model: "plain", want: 3 * f.textChunks},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A generous timeout: requests that end in time are unaffected.
			res, err := Run(context.Background(), Config{URL: srv.URL, Model: tt.model, Clients: 2, Timeout: 10 * time.Second},
				reqs(50, "ok", "ok", "ok"))
			if err != nil {
				t.Fatal(err)
			}
			if res.OutputTokens != tt.want || res.Errors != 0 {
				t.Errorf("output tokens %d errors %d (%s), want %d tokens", res.OutputTokens, res.Errors, res.FirstError, tt.want)
			}
			if res.PromptTokens != tt.prompt || res.PrefixHitRate != tt.hitRate {
				t.Errorf("prompt tokens %d hit rate %v, want %d, %v", res.PromptTokens, res.PrefixHitRate, tt.prompt, tt.hitRate)
			}
		})
	}
}

func TestRunProtocol(t *testing.T) {
	f := newQuickFake()
	srv := f.start(t)
	work := reqs(7, "ok", "ok", "ok", "ok", "ok")
	var progress []string
	res, err := Run(context.Background(), Config{
		URL: srv.URL + "/v1/", Model: "m1", APIKey: "sekrit", Clients: 1, Requests: 12,
		Progress: func(done, total int) { progress = append(progress, fmt.Sprintf("%d/%d", done, total)) },
	}, work)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 12 || res.Errors != 0 {
		t.Fatalf("counts: %+v", res)
	}
	// One client: the server sees the workload in file order, cycled.
	var want []string
	for i := range 12 {
		want = append(want, work[i%len(work)].Prompt)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Equal(f.prompts, want) {
		t.Errorf("prompts in order %q, want %q", f.prompts, want)
	}
	if len(progress) != 12 || progress[0] != "1/12" || progress[11] != "12/12" {
		t.Errorf("progress calls %v", progress)
	}
	// Back-to-back requests of one client reuse its connection. (Allow one
	// reconnect for a drain cut short on a loaded machine; without the drain
	// about half the requests reconnect.)
	if n := f.conns.Load(); n > 2 {
		t.Errorf("%d connections opened for 12 sequential requests, want 1", n)
	}
	for i, b := range f.bodies {
		if f.paths[i] != "POST /v1/completions" || f.auth[i] != "Bearer sekrit" {
			t.Fatalf("request %d: %s, auth %q", i, f.paths[i], f.auth[i])
		}
		so, _ := b["stream_options"].(map[string]any)
		temp, hasTemp := b["temperature"]
		if b["stream"] != true || b["ignore_eos"] != true || !hasTemp || temp != 0.0 ||
			b["max_tokens"] != 7.0 || b["model"] != "m1" || so["include_usage"] != true {
			t.Fatalf("request %d body %v", i, b)
		}
	}
}

func TestRunConcurrency(t *testing.T) {
	f := newFake()
	f.gap = time.Millisecond
	srv := f.start(t)
	work := reqs(4, "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok", "ok")
	res, err := Run(context.Background(), Config{URL: srv.URL, Clients: 4}, work)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 12 || res.Errors != 0 {
		t.Fatalf("counts: %+v", res)
	}
	f.mu.Lock()
	maxInflight := f.maxInflight
	f.maxInflight = 0
	f.mu.Unlock()
	if maxInflight != 4 {
		t.Errorf("max in-flight requests %d, want 4 (clients)", maxInflight)
	}
	if n := f.conns.Load(); n > 4 {
		t.Errorf("%d connections for 4 clients", n)
	}
	// More clients than requests: one request each, nothing more.
	res, err = Run(context.Background(), Config{URL: srv.URL, Clients: 10}, work[:3])
	f.mu.Lock()
	maxInflight = f.maxInflight
	f.mu.Unlock()
	if err != nil || res.Requests != 3 || maxInflight > 3 {
		t.Errorf("10 clients, 3 requests: %+v, err %v, max in-flight %d", res, err, maxInflight)
	}
}

func TestRunErrors(t *testing.T) {
	f := newQuickFake()
	srv := f.start(t)
	tests := []struct {
		name         string
		mode         string
		wantErrors   int
		wantRejected int
		wantMsg      string
	}{
		{name: "http 500", mode: "http500", wantErrors: 1, wantMsg: "HTTP 500: boom"},
		{name: "http 429 is rejected", mode: "reject", wantRejected: 1},
		{name: "plain text 404", mode: "plain404", wantErrors: 1, wantMsg: "HTTP 404: no such thing"},
		{name: "error event", mode: "errevent", wantErrors: 1, wantMsg: "error event: decode failed"},
		{name: "no [DONE]", mode: "truncate", wantErrors: 1, wantMsg: "without [DONE]"},
		{name: "bad chunk", mode: "badjson", wantErrors: 1, wantMsg: "bad stream event 1"},
		{name: "not streamed", mode: "nostream", wantErrors: 1, wantMsg: "not an event stream"},
		{name: "ok", mode: "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(context.Background(), Config{URL: srv.URL, Clients: 1}, reqs(8, tt.mode))
			if err != nil {
				t.Fatal(err)
			}
			if res.Requests != 1 || res.Errors != tt.wantErrors || res.Rejected != tt.wantRejected {
				t.Fatalf("counts: %+v", res)
			}
			if !strings.Contains(res.FirstError, tt.wantMsg) || (tt.wantMsg == "") != (res.FirstError == "") {
				t.Errorf("first error %q, want it to contain %q", res.FirstError, tt.wantMsg)
			}
			if tt.wantErrors+tt.wantRejected > 0 && (res.OutputTokens != 0 || res.TTFT.N != 0) {
				t.Errorf("failed request contributed metrics: %+v", res)
			}
		})
	}

	// Mixed together: failures do not disturb the successful requests, and
	// the first error is that of the earliest failed request in the workload.
	work := reqs(8, "ok", "reject", "errevent", "ok", "http500", "reject", "ok", "truncate")
	res, err := Run(context.Background(), Config{URL: srv.URL, Clients: 3}, work)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 8 || res.Errors != 3 || res.Rejected != 2 || res.TTFT.N != 3 {
		t.Errorf("counts: %+v", res)
	}
	if !strings.HasPrefix(res.FirstError, "error event:") {
		t.Errorf("first error %q, want the errevent one", res.FirstError)
	}
	if res.OutputTokens != 3*f.textChunks {
		t.Errorf("output tokens %d, want %d", res.OutputTokens, 3*f.textChunks)
	}
}

func TestRunConnectionRefused(t *testing.T) {
	srv := newFake().start(t)
	url := srv.URL
	srv.Close()
	res, err := Run(context.Background(), Config{URL: url, Clients: 2}, reqs(4, "ok", "ok", "ok"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 3 || res.Errors != 3 || res.FirstError == "" {
		t.Errorf("counts: %+v", res)
	}
}

func TestRunTimeout(t *testing.T) {
	srv := newFake().start(t)
	start := time.Now()
	res, err := Run(context.Background(), Config{URL: srv.URL, Clients: 2, Timeout: 100 * time.Millisecond},
		reqs(4, "hang", "hang", "hang"))
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("took %v with a 100ms timeout", el)
	}
	if res.Requests != 3 || res.Errors != 3 || res.FirstError != "timeout after 100ms" {
		t.Errorf("counts: %+v", res)
	}
}

func TestRunCancel(t *testing.T) {
	before := runtime.NumGoroutine()
	f := newQuickFake()
	srv := f.start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		cancelled atomic.Int64 // unix nanos of the cancel
		done      int
	)
	progress := func(d, _ int) {
		done = d
		// By now the other three clients are stuck in "hang" requests.
		time.AfterFunc(50*time.Millisecond, func() {
			cancelled.Store(time.Now().UnixNano())
			cancel()
		})
	}
	res, err := Run(ctx, Config{URL: srv.URL, Clients: 4, Progress: progress},
		reqs(4, "ok", "hang", "hang", "hang", "hang", "ok", "ok"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if lag := time.Since(time.Unix(0, cancelled.Load())); lag > time.Second {
		t.Errorf("Run returned %v after the cancel", lag)
	}
	// Only the first "ok" finished; the interrupted requests are not errors,
	// and the last two were never sent.
	if res.Requests != 1 || res.Errors != 0 || done != 1 || res.OutputTokens != f.textChunks {
		t.Errorf("counts after cancel: %+v, progress %d", res, done)
	}
	f.mu.Lock()
	sent := len(f.prompts)
	f.mu.Unlock()
	if sent != 5 {
		t.Errorf("%d requests sent, want 5", sent)
	}

	// Already cancelled: nothing is sent.
	res, err = Run(ctx, Config{URL: srv.URL, Clients: 2}, reqs(4, "ok"))
	if !errors.Is(err, context.Canceled) || res.Requests != 0 {
		t.Errorf("pre-cancelled run: %+v, %v", res, err)
	}

	// No goroutine of Run or its transport outlives it.
	srv.Close()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Run, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

func TestRunConfigErrors(t *testing.T) {
	ok := reqs(4, "ok")
	tests := []struct {
		name string
		cfg  Config
		reqs []Request
		want string
	}{
		{name: "no requests", cfg: Config{URL: "http://127.0.0.1:1", Clients: 1}, want: "no requests"},
		{name: "invalid request", cfg: Config{URL: "http://127.0.0.1:1", Clients: 1},
			reqs: []Request{{Kind: KindShort, Prompt: "x"}}, want: "request 0"},
		{name: "zero clients", cfg: Config{URL: "http://127.0.0.1:1"}, reqs: ok, want: "clients"},
		{name: "negative requests", cfg: Config{URL: "http://127.0.0.1:1", Clients: 1, Requests: -1}, reqs: ok, want: "requests"},
		{name: "negative timeout", cfg: Config{URL: "http://127.0.0.1:1", Clients: 1, Timeout: -1}, reqs: ok, want: "timeout"},
		{name: "empty URL", cfg: Config{Clients: 1}, reqs: ok, want: "URL"},
		{name: "no scheme", cfg: Config{URL: "127.0.0.1:8080", Clients: 1}, reqs: ok, want: "URL"},
		{name: "ftp", cfg: Config{URL: "ftp://127.0.0.1", Clients: 1}, reqs: ok, want: "http"},
		{name: "no host", cfg: Config{URL: "http://", Clients: 1}, reqs: ok, want: "no host"},
		{name: "query", cfg: Config{URL: "http://127.0.0.1:1/?a=b", Clients: 1}, reqs: ok, want: "query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(context.Background(), tt.cfg, tt.reqs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestCompletionsURL(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "bare", in: "http://127.0.0.1:8080", want: "http://127.0.0.1:8080/v1/completions"},
		{name: "slash", in: "http://127.0.0.1:8080/", want: "http://127.0.0.1:8080/v1/completions"},
		{name: "v1", in: "http://localhost:8080/v1", want: "http://localhost:8080/v1/completions"},
		{name: "v1 slash", in: "http://localhost:8080/v1/", want: "http://localhost:8080/v1/completions"},
		{name: "sub path", in: "https://127.0.0.1/llm/", want: "https://127.0.0.1/llm/v1/completions"},
		{name: "spaces", in: " http://127.0.0.1:1 ", want: "http://127.0.0.1:1/v1/completions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := completionsURL(tt.in)
			if err != nil || got != tt.want {
				t.Errorf("completionsURL(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "openai", in: `{"error":{"message":"m1","type":"x"}}`, want: "m1"},
		{name: "error string", in: `{"error":"m2"}`, want: "m2"},
		{name: "vllm", in: `{"object":"error","message":"m3"}`, want: "m3"},
		{name: "fastapi", in: `{"detail":"m4"}`, want: "m4"},
		{name: "json string", in: `"m5"`, want: "m5"},
		{name: "text", in: " oops \n", want: "oops"},
		{name: "empty", in: "", want: "(empty body)"},
		{name: "unknown json", in: `{"code":3}`, want: `{"code":3}`},
		{name: "long text cut", in: strings.Repeat("x", 400), want: strings.Repeat("x", 300) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errorMessage([]byte(tt.in)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
