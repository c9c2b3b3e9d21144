package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ubatch/internal/testkit"
)

// Ways a node dies while it serves a request: its connection breaks before any response, in
// the middle of a response body, or after a stream's first event.
func dieBeforeAnswering(_ *fakeNode, w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

func dieMidBody(_ *fakeNode, w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", "100")
	w.Write([]byte(`{"choices":`))
	http.NewResponseController(w).Flush()
	panic(http.ErrAbortHandler)
}

func dieMidStream(_ *fakeNode, w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Write([]byte("data: {\"choices\":[{\"text\":\"Once\"}]}\n\n"))
	http.NewResponseController(w).Flush()
	panic(http.ErrAbortHandler)
}

func (f *fakeNodes) calls() int64 {
	var n int64
	for _, x := range *f {
		n += x.calls.Load()
	}
	return n
}

type fakeNodes []*fakeNode

// TestQueryOfDeath sends, again and again, a request that kills every node serving it: it
// reaches two nodes, never a third, and is then refused; other requests still go through.
func TestQueryOfDeath(t *testing.T) {
	tests := []struct {
		name string
		die  behaviour
		// sends is how many times the request reaches a node before it is refused: a broken
		// response body is retried once in the same request, a broken stream (part of which the
		// client has) is not.
		sends      int
		wantStatus []int // of each request until the refusal
	}{
		{"no answer", dieBeforeAnswering, 2, []int{422}},
		{"broken body", dieMidBody, 2, []int{422}},
		{"broken stream", dieMidStream, 2, []int{200, 200, 422}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := fakeNodes{startFake(t, tc.die), startFake(t, tc.die), startFake(t, tc.die)}
			var urls []string
			for _, n := range nodes {
				urls = append(urls, n.ts.URL)
			}
			rt := startRouter(t, Config{Nodes: urls, HealthInterval: time.Hour})
			deadly := `{"prompt": "the query of death", "stream": true}`
			for i, want := range tc.wantStatus {
				status, _, body := rt.post("/v1/completions", deadly)
				if status != want {
					t.Fatalf("request %d: status %d, want %d: %s", i, status, want, body)
				}
				if status == http.StatusOK && !strings.Contains(string(body), "node_failed") {
					t.Fatalf("request %d: a broken stream without an error event: %s", i, body)
				}
				if status == http.StatusUnprocessableEntity && errorCode(body) != "request_quarantined" {
					t.Fatalf("request %d: code %q, want request_quarantined: %s", i, errorCode(body), body)
				}
			}
			if got := nodes.calls(); got != int64(tc.sends) {
				t.Fatalf("the deadly request reached %d nodes, want %d", got, tc.sends)
			}
			// Remembered: refused again without reaching a node.
			status, _, body := rt.post("/v1/completions", deadly)
			if status != http.StatusUnprocessableEntity || nodes.calls() != int64(tc.sends) {
				t.Fatalf("again: status %d after %d sends: %s", status, nodes.calls(), body)
			}
			if rt.counter("rejected", "quarantined") < 1 {
				t.Fatal("the refusal was not counted")
			}
			// Another body is not refused: it reaches a node.
			rt.post("/v1/completions", `{"prompt": "an innocent request", "stream": true}`)
			if nodes.calls() == int64(tc.sends) {
				t.Fatal("another request was refused too")
			}
		})
	}
}

// TestDeathIsRetriedOnce has the first node die and every later one fail in a way that is
// normally retried (502): after a death the request gets one more node, not every node.
func TestDeathIsRetriedOnce(t *testing.T) {
	var sent atomic.Int64
	b := func(f *fakeNode, w http.ResponseWriter, r *http.Request) {
		if sent.Add(1) == 1 {
			dieBeforeAnswering(f, w, r)
			return
		}
		answer(http.StatusBadGateway)(f, w, r)
	}
	nodes := fakeNodes{startFake(t, b), startFake(t, b), startFake(t, b)}
	rt := startRouter(t, Config{Nodes: []string{nodes[0].ts.URL, nodes[1].ts.URL, nodes[2].ts.URL}, HealthInterval: time.Hour})
	status, _, body := rt.post("/v1/completions", `{"prompt": "x"}`)
	if status != http.StatusBadGateway {
		t.Fatalf("status %d, want 502: %s", status, body)
	}
	if got := nodes.calls(); got != 2 {
		t.Fatalf("the request reached %d nodes, want 2 (the one that died, one more)", got)
	}
	var deaths float64
	for _, n := range nodes {
		deaths += rt.counter("deaths", label(n.ts.URL))
	}
	if deaths != 1 {
		t.Fatalf("%v deaths counted, want 1", deaths)
	}
}

func TestQuarantine(t *testing.T) {
	t0 := time.Unix(1000, 0)
	key := func(i int) bodyKey { return bodyKey{byte(i)} }
	steps := []struct {
		name   string
		record int // body recorded (-1: none)
		at     time.Duration
		query  int
		want   int // deaths of query after the step
	}{
		{"first death", 1, 0, 1, 1},
		{"other bodies apart", -1, 0, 2, 0},
		{"second death", 1, time.Second, 1, 2},
		{"expired", -1, time.Minute + time.Second, 1, 0},
		{"counted again from one after expiry", 1, 2 * time.Minute, 1, 1},
		{"fill: the one expiring first goes", 2, 2*time.Minute + time.Second, 1, 1},
		{"third body evicts the first", 3, 2*time.Minute + 2*time.Second, 1, 0},
		{"the second stays", -1, 2*time.Minute + 2*time.Second, 2, 1},
	}
	q := newQuarantine(time.Minute, 2)
	for _, s := range steps {
		now := t0.Add(s.at)
		if s.record >= 0 {
			q.record(key(s.record), now)
		}
		if got := q.deaths(key(s.query), now); got != s.want {
			t.Fatalf("%s: deaths %d, want %d", s.name, got, s.want)
		}
	}
	q.sweep(t0.Add(time.Hour))
	if q.active() {
		t.Fatal("expired records survive a sweep")
	}
}

// TestTooLargeBodyIsDrained sends bodies over the router's limit, with and without a
// Content-Length, as a client that writes the whole body before it reads: it must read the 413,
// not a reset connection.
func TestTooLargeBodyIsDrained(t *testing.T) {
	a := startFake(t, answer(http.StatusOK))
	rt := startRouter(t, Config{Nodes: []string{a.ts.URL}, MaxBodyBytes: 64 << 10, HealthInterval: time.Hour})
	body := bytes.Repeat([]byte("a"), 4<<20)
	tests := []struct {
		name, head string
		chunked    bool
	}{
		{"content-length", fmt.Sprintf("Content-Length: %d\r\n", len(body)), false},
		{"chunked", "Transfer-Encoding: chunked\r\n", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", strings.TrimPrefix(rt.ts.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n%s\r\n", tc.head)
			if tc.chunked {
				for off := 0; off < len(body); off += 64 << 10 {
					fmt.Fprintf(c, "%x\r\n%s\r\n", 64<<10, body[off:off+64<<10])
				}
				io.WriteString(c, "0\r\n\r\n")
			} else if _, err := c.Write(body); err != nil {
				t.Fatalf("writing the body: %v", err)
			}
			resp, err := io.ReadAll(c)
			if err != nil && len(resp) == 0 {
				t.Fatalf("reading the answer: %v", err)
			}
			if !bytes.HasPrefix(resp, []byte("HTTP/1.1 413")) || !bytes.Contains(resp, []byte("request_too_large")) {
				t.Fatalf("answer %.200q", resp)
			}
		})
	}
	if a.calls.Load() != 0 {
		t.Fatal("an oversized body reached the node")
	}
}

// TestSlowHealthWhileBusy has a node answer its health checks too late: while it serves the
// router's requests (none failed) that does not eject it; once idle, it does.
func TestSlowHealthWhileBusy(t *testing.T) {
	var slow atomic.Bool
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			if slow.Load() {
				time.Sleep(300 * time.Millisecond)
			}
			w.Write([]byte(`{"status":"ok"}`))
		case "/props":
			http.NotFound(w, r)
		default:
			<-release // a heavy request, parsed for a long time
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"choices":[]}`))
		}
	}))
	defer ts.Close()
	rt := startRouter(t, Config{Nodes: []string{ts.URL}, HealthInterval: time.Hour, HealthTimeout: 100 * time.Millisecond})
	done := make(chan struct{})
	for range 3 {
		go func() {
			rt.post("/v1/chat/completions", `{"messages": [{"role": "user", "content": "heavy"}]}`)
			done <- struct{}{}
		}()
	}
	testkit.Eventually(t, 5*time.Second, "requests in flight", func() bool { return rt.r.nodes[ts.URL].inflight.Load() == 3 })
	slow.Store(true)
	for range 4 {
		rt.r.checkHealth(context.Background())
	}
	if rt.r.Healthy() != 1 {
		t.Fatal("late health checks ejected a node busy with the router's requests")
	}
	close(release)
	for range 3 {
		<-done
	}
	for range 3 {
		rt.r.checkHealth(context.Background())
	}
	if rt.r.Healthy() != 0 {
		t.Fatal("late health checks of an idle node did not eject it")
	}
}

// TestTransportFailureKinds tells a node that was never reached (connect: retried freely) from
// one whose connection broke after the request was sent (died: the guard's evidence).
func TestTransportFailureKinds(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	dying := startFake(t, dieBeforeAnswering)
	tests := []struct{ name, url, want string }{
		{"nothing listening", closedURL, "connect"},
		{"closed after the request", dying.ts.URL, "died"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := http.Post(tc.url+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "x"}`))
			if err == nil {
				t.Fatal("no error")
			}
			if got := transportFailure(err); got != tc.want {
				t.Fatalf("%v: %s, want %s", err, got, tc.want)
			}
		})
	}
}
