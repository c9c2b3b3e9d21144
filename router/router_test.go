package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"ubatch/fleet"
	"ubatch/internal/testkit"
	"ubatch/internal/testredis"
)

// story is a prompt long enough for several KV blocks.
const story = "Once upon a time there was a little girl named Lily. She loved to play outside in the park " +
	"with her friends and her dog. One day she found a big red ball under a tree and she was very happy."

// TestPromptTokensMatchTheNode checks the router's tokenization against a real node's usage for
// every prompt form: a difference would make every routing hash miss.
func TestPromptTokensMatchTheNode(t *testing.T) {
	n := startNode(t, "", "")
	p := prompter(t)
	tests := []struct {
		name, path, body string
	}{
		{"completion text", "/v1/completions", `{"prompt": %q, "max_tokens": 1}`},
		{"completion tokens", "/v1/completions", `{"prompt": [1, 400, 50, 60, 70], "max_tokens": 1, "_": %q}`},
		{"chat", "/v1/chat/completions", `{"messages": [{"role": "system", "content": %q}, {"role": "user", "content": "hi"}], "max_tokens": 1}`},
		{"chat with parts", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "text", "text": %q}]}], "max_tokens": 1}`},
		{"llama.cpp completion", "/completion", `{"prompt": %q, "n_predict": 1}`},
		{"completion without /v1", "/completions", `{"prompt": %q, "max_tokens": 1}`},
		{"chat without /v1", "/chat/completions", `{"messages": [{"role": "user", "content": %q}], "max_tokens": 1}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(tc.body, story)
			got := p.parse(tc.path, []byte(body), testLimits)
			resp, err := http.Post(n.url+tc.path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			data := readAll(t, resp)
			var want int
			if tc.path == "/completion" {
				var lc struct {
					TokensEvaluated int `json:"tokens_evaluated"`
				}
				if err := json.Unmarshal(data, &lc); err != nil {
					t.Fatalf("%v: %s", err, data)
				}
				want = lc.TokensEvaluated
			} else {
				want, _ = usageOf(t, data)
			}
			if len(got.tokens) != want || want == 0 {
				t.Fatalf("router counts %d prompt tokens, the node %d", len(got.tokens), want)
			}
		})
	}
}

func TestRoutesRepeatedPromptsToTheNodeThatCachedThem(t *testing.T) {
	rs := testredis.Start(t)
	var nodes []*testNode
	for i := range 3 {
		nodes = append(nodes, startNode(t, fmt.Sprintf("n%d", i), rs.URL))
	}
	// Affinity off: only what the nodes publish can explain a prefix decision.
	rt := startRouter(t, Config{Index: fleet.NewIndex(rs.Client(), ""), AffinityTTL: -1})
	testkit.Eventually(t, 10*time.Second, "three healthy nodes", func() bool { return rt.r.Healthy() == 3 })

	first := fmt.Sprintf(`{"prompt": %q, "max_tokens": 2, "temperature": 0}`, story+" The end.")
	status, owner, body := rt.post("/v1/completions", first)
	if status != http.StatusOK || owner == "" {
		t.Fatalf("status %d node %q: %s", status, owner, body)
	}
	if rt.counter("decisions", owner, ReasonLeastLoaded) != 1 {
		t.Fatal("the first request was not routed as least_loaded")
	}
	// Wait for the node's blocks to reach Redis.
	testkit.Eventually(t, 10*time.Second, "the blocks published", func() bool {
		return rt.r.decide(context.Background(), rt.r.cfg.Prompter.parse("/v1/completions", []byte(first), testLimits).tokens, 10).maxCached > 0
	})
	for i := range 4 {
		// Same story, another ending: the shared prefix is what the cache holds.
		again := fmt.Sprintf(`{"prompt": %q, "max_tokens": 2, "temperature": 0}`, story+fmt.Sprintf(" Ending %d.", i))
		status, got, body := rt.post("/v1/completions", again)
		if status != http.StatusOK || got != owner {
			t.Fatalf("repeat %d went to %q (status %d), the prefix is on %q: %s", i, got, status, owner, body)
		}
		if _, cached := usageOf(t, body); cached < 32 {
			t.Fatalf("repeat %d: the node reports %d cached tokens", i, cached)
		}
	}
	if rt.counter("decisions", owner, ReasonPrefix) != 4 {
		t.Fatalf("prefix decisions on %s: %v, want 4", owner, rt.counter("decisions", owner, ReasonPrefix))
	}
	if rt.counter("mismatch") != 0 {
		t.Fatal("prompt token counts differ between router and node")
	}
	// An unrelated prompt is not a prefix decision.
	other := `{"prompt": "A dragon flew over the mountains and the sea, looking for a place to sleep at night.", "max_tokens": 1}`
	if status, n, _ := rt.post("/v1/completions", other); status != http.StatusOK || rt.counter("decisions", n, ReasonLeastLoaded) < 1 {
		t.Fatalf("unrelated prompt: status %d, node %s not least_loaded", status, n)
	}
}

func TestAffinityKeepsRoutingWhileRedisIsDown(t *testing.T) {
	rs := testredis.Start(t)
	a, b := startNode(t, "a", rs.URL), startNode(t, "b", rs.URL)
	rt := startRouter(t, Config{Index: fleet.NewIndex(rs.Client(), ""), Nodes: []string{a.url, b.url}})
	testkit.Eventually(t, 10*time.Second, "two healthy nodes with statuses", func() bool {
		n := 0
		for _, s := range rt.r.snapshotNodes() {
			if s.healthy && s.hasState {
				n++
			}
		}
		return n == 2
	})
	rs.Stop()
	body := fmt.Sprintf(`{"prompt": %q, "max_tokens": 1}`, story)
	_, owner, _ := rt.post("/v1/completions", body)
	for range 3 {
		status, got, resp := rt.post("/v1/completions", body)
		if status != http.StatusOK || got != owner {
			t.Fatalf("with Redis down the repeat went to %s (status %d), not %s: %s", got, status, owner, resp)
		}
	}
	testkit.Eventually(t, 10*time.Second, "Redis errors counted", func() bool { return testutilRedisErrors(rt) > 0 })
}

func testutilRedisErrors(rt *testRouter) float64 { return testutil.ToFloat64(rt.r.m.redisErrors) }

// faulty is a node that misbehaves as told: "ok" proxies to a real node, "502", "garbage",
// "drop" (closes the connection without answering) and "break" (streams two events, then dies);
// "count" answers {} and counts. "break" and "count" pass their health checks.
type faulty struct {
	mode  atomic.Value
	real  string
	calls atomic.Int64
	ts    *httptest.Server
}

func startFaulty(t *testing.T, real, mode string) *faulty {
	f := &faulty{real: real}
	f.mode.Store(mode)
	f.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mode := f.mode.Load().(string)
		if r.URL.Path != "/health" && r.URL.Path != "/props" { // the router's own reads are not counted
			f.calls.Add(1)
		} else if mode == "break" || mode == "count" {
			w.Write([]byte(`{"status":"ok"}`))
			return
		}
		switch {
		case mode == "count":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{}`))
		case mode == "ok":
			resp, err := http.Post(f.real+r.URL.Path, "application/json", r.Body)
			if r.Method == http.MethodGet {
				resp, err = http.Get(f.real + r.URL.Path)
			}
			if err != nil {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			copyHeader(w.Header(), resp.Header)
			w.WriteHeader(resp.StatusCode)
			io.Copy(w, resp.Body)
		case mode == "502":
			http.Error(w, "bad gateway", http.StatusBadGateway)
		case mode == "garbage":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte("\x00\x01 this is not JSON"))
		case mode == "drop":
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
		case mode == "break":
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write([]byte("data: {\"choices\":[{\"text\":\"Once\"}]}\n\n"))
			http.NewResponseController(w).Flush()
			w.Write([]byte("data: {\"choices\":[{\"text\":\" upon\"}]}\n\ndata: {\"cho"))
			http.NewResponseController(w).Flush()
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
		}
	}))
	t.Cleanup(f.ts.Close)
	return f
}

func TestBadNodesLeaveRotationAndComeBack(t *testing.T) {
	good := startNode(t, "", "")
	tests := []struct{ mode, retry string }{
		{"502", "status_5xx"},
		{"garbage", "garbage"},
		{"drop", "died"}, // the connection closed after the request was sent
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			bad := startFaulty(t, good.url, "ok")
			rt := startRouter(t, Config{Nodes: []string{bad.ts.URL, good.url}})
			testkit.Eventually(t, 10*time.Second, "both healthy", func() bool { return rt.r.Healthy() == 2 })
			bad.mode.Store(tc.mode)
			for i := range 6 {
				status, n, body := rt.post("/v1/completions", fmt.Sprintf(`{"prompt": "request %d", "max_tokens": 2}`, i))
				if status != http.StatusOK || n != label(good.url) {
					t.Fatalf("request %d: status %d from %s: %s", i, status, n, body)
				}
			}
			if rt.counter("healthy", label(bad.ts.URL)) != 0 {
				t.Fatal("the bad node is still in rotation")
			}
			// Fall (3) failures take it out; health checks failing meanwhile may do it sooner.
			if bad.calls.Load() > 3 {
				t.Fatalf("the bad node got %d requests, more than --fall", bad.calls.Load())
			}
			if tc.mode != "drop" || bad.calls.Load() > 0 {
				if rt.counter("retries", tc.retry) < 1 {
					t.Fatalf("no %s retry counted", tc.retry)
				}
			}
			bad.mode.Store("ok")
			testkit.Eventually(t, 10*time.Second, "the node back in rotation", func() bool { return rt.counter("healthy", label(bad.ts.URL)) == 1 })
			seen := false
			for i := range 6 {
				if _, n, _ := rt.post("/v1/completions", fmt.Sprintf(`{"prompt": "again %d", "max_tokens": 1}`, i)); n == label(bad.ts.URL) {
					seen = true
				}
			}
			if !seen {
				t.Fatal("the recovered node received no request")
			}
		})
	}
}

func TestMidStreamDeathEndsWithAnErrorEvent(t *testing.T) {
	bad := startFaulty(t, "", "break")
	rt := startRouter(t, Config{Nodes: []string{bad.ts.URL}})
	testkit.Eventually(t, 10*time.Second, "healthy", func() bool { return rt.r.Healthy() == 1 })
	done := make(chan struct{})
	var status int
	var body []byte
	go func() {
		defer close(done)
		status, _, body = rt.post("/v1/completions", `{"prompt": "x", "stream": true}`)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream hangs after the node died")
	}
	ev := events(body)
	if status != http.StatusOK || len(ev) != 3 || !strings.Contains(ev[0], "Once") || !strings.Contains(ev[1], "upon") {
		t.Fatalf("status %d, events %q", status, ev)
	}
	if !strings.Contains(ev[2], `"error"`) || !strings.Contains(ev[2], "node_failed") {
		t.Fatalf("last event %q is not an error event", ev[2])
	}
	if rt.counter("stream_errors", label(bad.ts.URL)) != 1 {
		t.Fatal("stream error not counted")
	}
}

func TestBodyLimits(t *testing.T) {
	n := startFaulty(t, "", "count")
	rt := startRouter(t, Config{Nodes: []string{n.ts.URL}, MaxBodyBytes: 1000})
	testkit.Eventually(t, 10*time.Second, "healthy", func() bool { return rt.r.Healthy() == 1 })
	big := fmt.Sprintf(`{"prompt": %q}`, strings.Repeat("a", 2000))
	if status, _, _ := rt.post("/v1/completions", big); status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d for a body over the router's limit", status)
	}
	if n.calls.Load() != 0 {
		t.Fatal("an oversized body reached the node")
	}
	// A node publishing a smaller limit than the router's never receives a larger body.
	r := rt.r
	r.mu.Lock()
	for _, nd := range r.nodes {
		nd.status, nd.statusAt = fleet.Status{ID: "x", URL: nd.url, BlockSize: 16, MaxBody: 100}, time.Now().Add(time.Hour)
	}
	r.mu.Unlock()
	mid := fmt.Sprintf(`{"prompt": %q}`, strings.Repeat("a", 500))
	if status, _, _ := rt.post("/v1/completions", mid); status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d for a body over the node's published limit", status)
	}
	if n.calls.Load() != 0 {
		t.Fatal("a body over the node's limit reached it")
	}
}

func TestRedisEntriesOfUnknownNodesAreIgnored(t *testing.T) {
	rs := testredis.Start(t)
	good := startNode(t, "good", rs.URL)
	stranger := startFaulty(t, "", "garbage")
	// Another node, not in --nodes, claims to hold every prompt.
	c := rs.Client()
	ctx := context.Background()
	c.SAdd(ctx, "ubatch:nodes", "stranger")
	c.Set(ctx, "ubatch:node:stranger", fmt.Sprintf(`{"id":"stranger","url":%q,"block_size":16}`, stranger.ts.URL), time.Minute)
	rt := startRouter(t, Config{Index: fleet.NewIndex(c, ""), Nodes: []string{good.url}})
	testkit.Eventually(t, 10*time.Second, "the stranger counted", func() bool { return rt.counter("unknown") == 1 && rt.r.Healthy() == 1 })
	for i := range 4 {
		if status, n, _ := rt.post("/v1/completions", fmt.Sprintf(`{"prompt": "hello %d", "max_tokens": 1}`, i)); status != 200 || n != label(good.url) {
			t.Fatalf("status %d from %s", status, n)
		}
	}
	if stranger.calls.Load() != 0 {
		t.Fatal("the node missing from --nodes received requests")
	}
}

func TestNoHealthyNode(t *testing.T) {
	rt := startRouter(t, Config{Nodes: []string{"http://127.0.0.1:1"}})
	if status, _, body := rt.post("/v1/completions", `{"prompt": "x"}`); status != http.StatusServiceUnavailable || !strings.Contains(string(body), "no_healthy_node") {
		t.Fatalf("status %d: %s", status, body)
	}
	resp, err := http.Get(rt.ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/health %d with no healthy node", resp.StatusCode)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	p := &Prompter{}
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no prompter", Config{Nodes: []string{"http://a:1"}}},
		{"no nodes and no redis", Config{Prompter: p}},
		{"bad url", Config{Prompter: p, Nodes: []string{"ftp://a"}}},
		{"duplicate", Config{Prompter: p, Nodes: []string{"http://a:1", "http://A:1/"}}},
		{"nodes and discovery", Config{Prompter: p, Nodes: []string{"http://a:1"}, Discovery: chanDiscovery{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestOtherRoutesAreForwarded(t *testing.T) {
	n := startNode(t, "", "")
	rt := startRouter(t, Config{Nodes: []string{n.url}})
	testkit.Eventually(t, 10*time.Second, "healthy", func() bool { return rt.r.Healthy() == 1 })
	tests := []struct{ name, method, path, body, want string }{
		{"models", http.MethodGet, "/v1/models", "", `"stories"`},
		{"one model", http.MethodGet, "/v1/models/stories", "", `"stories"`},
		{"props", http.MethodGet, "/props", "", `{`},
		{"tokenize", http.MethodPost, "/tokenize", `{"content": "hello"}`, `"tokens"`},
		{"the web page", http.MethodGet, "/", "", `<!doctype html>`},
		{"a page asset", http.MethodGet, "/ui/app.js", "", `/live`},
		// the node's answer, not the router's "no route": this node has no live view
		{"the live feed", http.MethodGet, "/live", "", `the live view is not enabled on this server`},
		{"unknown route", http.MethodGet, "/nope", "", `not_found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, rt.ts.URL+tc.path, strings.NewReader(tc.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b := readAll(t, resp)
			if !strings.Contains(string(b), tc.want) {
				t.Fatalf("%s %s: %d %s", tc.method, tc.path, resp.StatusCode, b)
			}
		})
	}
}
