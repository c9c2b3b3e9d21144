package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ubatch/engine"
	"ubatch/internal/testhttp"
)

func TestWebRoutes(t *testing.T) {
	e := newEnv(t, envOptions{apiKey: "sekrit", live: true})
	tests := []struct {
		name, path, key string
		status          int
		contentType     string // prefix
		body            string // substring
	}{
		{name: "page without key", path: "/", status: 200, contentType: "text/html", body: `data-testid="step-count"`},
		{name: "page with query", path: "/?q=hello", status: 200, contentType: "text/html", body: "/ui/app.js"},
		{name: "script", path: "/ui/app.js", status: 200, contentType: "text/javascript", body: "/v1/chat/completions"},
		{name: "style", path: "/ui/style.css", status: 200, contentType: "text/css", body: ".chart"},
		{name: "missing asset", path: "/ui/nope.js", status: 404},
		{name: "live needs the key", path: "/live", status: 401, contentType: "application/json", body: "invalid_api_key"},
		{name: "unknown API path keeps the JSON 404", path: "/v1/nope", key: "sekrit", status: 404, contentType: "application/json", body: "no route GET /v1/nope"},
		{name: "unknown path under root", path: "/index.htm", key: "sekrit", status: 404, contentType: "application/json", body: "not_found"},
		{name: "API still needs the key", path: "/v1/models", status: 401, contentType: "application/json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, e.URL+tc.path, nil)
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			resp, err := e.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, tc.contentType) {
				t.Errorf("Content-Type %q, want %q...", ct, tc.contentType)
			}
			if !strings.Contains(string(body), tc.body) {
				t.Errorf("body does not contain %q:\n%.400s", tc.body, body)
			}
		})
	}
}

// TestWebPageNoInline: the page has nothing its CSP would block (inline script, event-handler
// attributes, style attributes, javascript: URLs), so that it works without 'unsafe-inline'. The
// browser test checks the same in Chromium, with the page's script running.
func TestWebPageNoInline(t *testing.T) {
	e := newEnv(t, envOptions{})
	resp, err := e.Client.Get(e.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	tests := []struct {
		name string
		re   *regexp.Regexp
		bad  string // a snippet it must catch
	}{
		{name: "inline script", re: regexp.MustCompile(`(?is)<script\b[^>]*>\s*[^<\s]`), bad: "<script>\n  go()</script>"},
		{name: "event-handler attribute", re: regexp.MustCompile(`(?i)<[^>]*\son[a-z]+\s*=`), bad: `<button id="b" onClick="go()">`},
		{name: "style attribute", re: regexp.MustCompile(`(?i)<[^>]*\sstyle\s*=`), bad: `<div class="a" style="width: 1px">`},
		{name: "style element", re: regexp.MustCompile(`(?i)<style\b`), bad: "<style>"},
		{name: "javascript: URL", re: regexp.MustCompile(`(?i)javascript:`), bad: `<a href="JavaScript:go()">`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.re.MatchString(tc.bad) {
				t.Fatalf("%s does not catch %q", tc.re, tc.bad)
			}
			if m := tc.re.Find(page); m != nil {
				t.Errorf("the page has an %s: %.200s", tc.name, m)
			}
		})
	}
	if !strings.Contains(string(page), `<script src="/ui/app.js"></script>`) {
		t.Error("the page does not load /ui/app.js: the check above proves nothing")
	}
}

// readLive reads GET /live events until done accepts one, and returns it.
func readLive(t *testing.T, sc *bufio.Scanner, done func(LiveSnapshot) bool) LiveSnapshot {
	t.Helper()
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var s LiveSnapshot
		if err := json.Unmarshal([]byte(data), &s); err != nil {
			t.Fatalf("bad live event %q: %v", data, err)
		}
		if done(s) {
			return s
		}
	}
	t.Fatalf("live stream ended: %v", sc.Err())
	return LiveSnapshot{}
}

func TestLiveFeed(t *testing.T) {
	e := newEnv(t, envOptions{live: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+"/live", nil)
	resp, err := e.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	first := readLive(t, sc, func(LiveSnapshot) bool { return true })
	if first.Counts.Steps != 0 || len(first.Steps) != 0 || first.KVTotal == 0 {
		t.Fatalf("first event of an idle server: %+v", first)
	}

	var res testhttp.Completion
	e.PostJSON("/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}, 200, &res)
	s := readLive(t, sc, func(s LiveSnapshot) bool { return s.Counts.Finished == 1 })
	if len(s.Requests) != 1 {
		t.Fatalf("requests %+v, want the one finished", s.Requests)
	}
	r := s.Requests[0]
	if r.Prompt != res.Usage.PromptTokens || r.Completion != res.Usage.CompletionTokens || r.Finish != res.Choices[0].FinishReason {
		t.Errorf("live request %+v, the API's usage %+v finish %q", r, res.Usage, res.Choices[0].FinishReason)
	}
	if r.Completion > 0 && (r.TTFTMS <= 0 || r.LatencyMS < r.TTFTMS) {
		t.Errorf("live request timings %+v", r)
	}
	if s.Counts.Generated != uint64(res.Usage.CompletionTokens) || s.Counts.Admitted != 1 || s.Counts.Lookups != 1 {
		t.Errorf("counts %+v, want %d generated, 1 admitted, 1 lookup", s.Counts, res.Usage.CompletionTokens)
	}
	if len(s.Steps) == 0 || uint64(len(s.Steps)) != min(s.Counts.Steps, liveSteps) {
		t.Fatalf("%d steps listed of %d", len(s.Steps), s.Counts.Steps)
	}
	prefill := 0
	for i, st := range s.Steps {
		if st.N != uint64(i+1) || st.Decode+st.Prefill == 0 || st.Decode+st.Prefill > st.Budget || st.Reason == "" || st.KVTotal != first.KVTotal {
			t.Errorf("step %d: %+v", i, st)
		}
		prefill += st.Prefill
	}
	if prefill != res.Usage.PromptTokens {
		t.Errorf("steps computed %d prompt tokens, the prompt has %d", prefill, res.Usage.PromptTokens)
	}
	// The same prompt again is a prefix-cache hit.
	e.PostJSON("/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}, 200, &res)
	s = readLive(t, sc, func(s LiveSnapshot) bool { return s.Counts.Finished == 2 })
	if s.Counts.LookupHits != 1 || s.Requests[1].Cached == 0 || s.Requests[1].N != 2 {
		t.Errorf("second request: counts %+v, request %+v; want a prefix-cache hit", s.Counts, s.Requests[1])
	}
}

func TestLiveRings(t *testing.T) {
	l := NewLive()
	const steps, reqs = liveSteps + 10, liveRequests + 3
	for i := range steps {
		l.Step(engine.StepInfo{DecodeTokens: i, Budget: 512})
	}
	for i := range reqs {
		l.Finished(engine.FinishLength, engine.Usage{CompletionTokens: i})
	}
	s := l.Snapshot()
	if len(s.Steps) != liveSteps || s.Steps[0].N != steps-liveSteps+1 || s.Steps[liveSteps-1].N != steps ||
		s.Steps[liveSteps-1].Decode != steps-1 {
		t.Errorf("steps: %d kept, first %+v, last %+v", len(s.Steps), s.Steps[0], s.Steps[len(s.Steps)-1])
	}
	if len(s.Requests) != liveRequests || s.Requests[0].N != reqs-liveRequests+1 || s.Requests[liveRequests-1].Completion != reqs-1 {
		t.Errorf("requests: %d kept, first %+v, last %+v", len(s.Requests), s.Requests[0], s.Requests[len(s.Requests)-1])
	}
	if s.Counts.Steps != steps || s.Counts.Finished != reqs || s.Seq != steps+reqs {
		t.Errorf("counts %+v seq %d", s.Counts, s.Seq)
	}
	// The engine goroutine calls these for every step and token: they must not allocate.
	obs := Observers{NewMetrics(prometheus.NewRegistry()), l}
	info := engine.StepInfo{DecodeTokens: 3, PrefillTokens: 40, Budget: 192, Reason: engine.BudgetTarget}
	if n := testing.AllocsPerRun(100, func() {
		obs.Step(info)
		obs.Token(false, time.Millisecond)
		obs.Lookup(40, 16)
		obs.Finished(engine.FinishStop, engine.Usage{CompletionTokens: 5})
	}); n != 0 {
		t.Errorf("observer calls allocate %v times", n)
	}
}

// TestLiveClose: an open live stream must not hold a graceful shutdown for its grace period once
// the hub is closed (as `ubatch serve` does when its context ends), and a closed hub answers 503.
func TestLiveClose(t *testing.T) {
	e := newEnv(t, envOptions{live: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	context.AfterFunc(ctx, e.srv.cfg.Live.Close)
	addr, served := runServe(t, ctx, e.srv.Handler(), ServeConfig{Grace: time.Minute})
	resp, err := e.Client.Get("http://" + addr + "/live")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	readLive(t, sc, func(LiveSnapshot) bool { return true })
	cancel()
	for sc.Scan() {
	}
	awaitServed(t, served, 20*time.Second, "with the live stream open (its hub closed)")
	// The hub stays closed: a new stream is refused.
	r, err := http.Get(e.URL + "/live")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET /live on a closed hub: status %d, want 503", r.StatusCode)
	}
}
