package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ubatch/internal/iocount"
)

// fakeNode is a node whose /health always answers ok and whose other routes run the current
// behaviour, counting the requests: these tests judge the router's reaction to each answer, not
// the health checks.
type fakeNode struct {
	ts      *httptest.Server
	calls   atomic.Int64
	do      atomic.Pointer[behaviour]
	release chan struct{} // closed at cleanup: ends the handlers that hang
}

type behaviour func(f *fakeNode, w http.ResponseWriter, r *http.Request)

func startFake(t *testing.T, b behaviour) *fakeNode {
	t.Helper()
	f := &fakeNode{release: make(chan struct{})}
	f.set(b)
	f.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.Write([]byte(`{"status":"ok"}`))
			return
		case "/props": // the router reads the node's context: no such route here
			http.NotFound(w, r)
			return
		}
		f.calls.Add(1)
		(*f.do.Load())(f, w, r)
	}))
	t.Cleanup(f.ts.Close)
	t.Cleanup(func() { close(f.release) }) // runs first: hanging handlers end, then Close returns
	return f
}

func (f *fakeNode) set(b behaviour) { f.do.Store(&b) }

// answer is a behaviour answering status with an OpenAI error body (or {"choices":[]} for 200).
func answer(status int) behaviour {
	return func(_ *fakeNode, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status == http.StatusOK {
			w.Write([]byte(`{"choices":[]}`))
			return
		}
		w.Write(errorJSON("x_error", "test", "answered "+strconv.Itoa(status)))
	}
}

// busy503 is a node's own "busy, retry": 503 with Retry-After and an OpenAI error body.
func busy503(_ *fakeNode, w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(errorJSON("server_error", "busy", "the server is busy parsing: retry"))
}

func plain500(_ *fakeNode, w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "<html>Internal Server Error</html>", http.StatusInternalServerError)
}

func garbage(_ *fakeNode, w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte("\x00 not JSON"))
}

// hang sends the headers of contentType (none if empty), then nothing until the router gives up.
func hang(contentType string) behaviour {
	return func(f *fakeNode, w http.ResponseWriter, r *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
	}
}

// errorCode is the code of an OpenAI error body, "" if there is none.
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(body, &e)
	return e.Error.Code
}

// TestWhatIsRetried sends one request to two nodes that both answer alike and counts the
// requests they got: a request-caused answer reaches one node only, a node-caused one both.
func TestWhatIsRetried(t *testing.T) {
	tests := []struct {
		name       string
		do         behaviour
		wantStatus int
		wantCalls  int64  // requests the two nodes got together
		failure    string // failure kind counted on the node(s) that got it; "" = none
	}{
		{"400 passed on", answer(http.StatusBadRequest), 400, 1, ""},
		{"404 passed on", answer(http.StatusNotFound), 404, 1, ""},
		{"500 with an OpenAI body passed on", answer(http.StatusInternalServerError), 500, 1, "verdict_5xx"},
		{"500 without an OpenAI body retried", plain500, 500, 2, "status_5xx"},
		{"502 retried", answer(http.StatusBadGateway), 502, 2, "status_5xx"},
		{"503 retried", answer(http.StatusServiceUnavailable), 503, 2, "status_5xx"},
		{"429 retried", answer(http.StatusTooManyRequests), 429, 2, ""},
		{"busy 503 with Retry-After retried, not counted", busy503, 503, 2, ""},
		{"garbage retried", garbage, 502, 2, "garbage"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := startFake(t, tc.do), startFake(t, tc.do)
			rt := startRouter(t, Config{Nodes: []string{a.ts.URL, b.ts.URL}, HealthInterval: time.Hour})
			status, _, body := rt.post("/v1/completions", `{"prompt": "x"}`)
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", status, tc.wantStatus, body)
			}
			if got := a.calls.Load() + b.calls.Load(); got != tc.wantCalls {
				t.Fatalf("the nodes got %d requests, want %d", got, tc.wantCalls)
			}
			for _, f := range []*fakeNode{a, b} {
				if tc.failure == "" && rt.counter("failures", label(f.ts.URL), "status_5xx") != 0 {
					t.Fatalf("%s: a failure was counted", label(f.ts.URL))
				}
				if tc.failure != "" && f.calls.Load() > 0 && rt.counter("failures", label(f.ts.URL), tc.failure) != 1 {
					t.Fatalf("%s: the %s failure was not counted", label(f.ts.URL), tc.failure)
				}
				if rt.counter("healthy", label(f.ts.URL)) != 1 {
					t.Fatalf("%s left rotation after one failure", label(f.ts.URL))
				}
			}
		})
	}
}

// TestFallConsecutiveFailures sends a sequence of requests to one node answering as told and
// checks whether the node is in rotation at the end.
func TestFallConsecutiveFailures(t *testing.T) {
	ok, e400, e500 := answer(http.StatusOK), answer(http.StatusBadRequest), answer(http.StatusInternalServerError)
	tests := []struct {
		name    string
		seq     []behaviour
		healthy bool
	}{
		{"one 5xx stays", []behaviour{plain500}, true},
		{"two 5xx stay", []behaviour{plain500, plain500}, true},
		{"three 5xx eject", []behaviour{plain500, plain500, plain500}, false},
		{"a success resets the count", []behaviour{plain500, plain500, ok, plain500, plain500}, true},
		{"500 verdicts (OpenAI error bodies) never count", []behaviour{e500, e500, e500, e500}, true},
		{"a 500 verdict neither counts nor resets", []behaviour{plain500, plain500, e500, plain500}, false},
		{"a 4xx never counts", []behaviour{e400, e400, e400, e400}, true},
		{"a 4xx resets the count", []behaviour{plain500, plain500, e400, plain500, plain500}, true},
		{"busy 503s never count", []behaviour{busy503, busy503, busy503, busy503}, true},
		{"413s never count", []behaviour{answer(http.StatusRequestEntityTooLarge), answer(http.StatusRequestEntityTooLarge),
			answer(http.StatusRequestEntityTooLarge)}, true},
		{"three garbage answers eject", []behaviour{garbage, garbage, garbage}, false},
		{"three first-byte timeouts eject", []behaviour{hang(""), hang(""), hang("")}, false},
		{"failures of different kinds add up", []behaviour{plain500, garbage, hang("application/json")}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, ok)
			// Health checks only when the test calls them: they must not bring the node back.
			rt := startRouter(t, Config{Nodes: []string{f.ts.URL}, HealthInterval: time.Hour, FirstByteTimeout: 100 * time.Millisecond})
			if rt.r.Healthy() != 1 {
				t.Fatal("the node is not in rotation at the start")
			}
			for _, b := range tc.seq {
				f.set(b)
				rt.post("/v1/completions", `{"prompt": "x"}`)
			}
			if got := rt.r.Healthy() == 1; got != tc.healthy {
				t.Fatalf("in rotation: %v, want %v", got, tc.healthy)
			}
			if got := rt.counter("healthy", label(f.ts.URL)) == 1; got != tc.healthy {
				t.Fatalf("ubatch_route_node_healthy says %v, want %v", got, tc.healthy)
			}
			want := 0.0
			if !tc.healthy {
				want = 1
			}
			if got := rt.counter("ejections", label(f.ts.URL), "requests"); got != want {
				t.Fatalf("%v ejections counted, want %v", got, want)
			}
			if tc.healthy {
				return
			}
			// Rise (2) good health checks bring it back, with its failures forgotten: one more
			// 5xx does not eject it again.
			f.set(plain500)
			rt.r.checkHealth(context.Background())
			if rt.r.Healthy() != 0 {
				t.Fatal("back in rotation after one good health check, before --rise")
			}
			rt.r.checkHealth(context.Background())
			if rt.r.Healthy() != 1 {
				t.Fatal("not back in rotation after --rise good health checks")
			}
			rt.post("/v1/completions", `{"prompt": "x"}`)
			if rt.r.Healthy() != 1 {
				t.Fatal("one 5xx ejected the node that just came back: its old failures were kept")
			}
		})
	}
}

// TestFailedHealthChecksEject checks the probe side of --fall: Fall failed checks in a row take
// a node out, a good one in between resets the count.
func TestFailedHealthChecksEject(t *testing.T) {
	var up atomic.Bool
	up.Store(true)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"status":"ok"}`))
	}))
	t.Cleanup(ts.Close)
	rt := startRouter(t, Config{Nodes: []string{ts.URL}, HealthInterval: time.Hour})
	ctx := context.Background()
	for i, probe := range []bool{false, false, true, false, false} {
		up.Store(probe)
		rt.r.checkHealth(ctx)
		if rt.r.Healthy() != 1 {
			t.Fatalf("out of rotation after check %d, with no %d failed checks in a row", i, 3)
		}
	}
	up.Store(false)
	rt.r.checkHealth(ctx)
	if rt.r.Healthy() != 0 || rt.counter("ejections", label(ts.URL), "health") != 1 {
		t.Fatal("three failed health checks in a row did not eject the node")
	}
}

// TestFirstByteTimeout: nodes that never send a body byte are given up on after the
// first-byte timeout, however long the idle timeout, and the request tries the other node.
func TestFirstByteTimeout(t *testing.T) {
	tests := []struct {
		name, body string
		do         behaviour
	}{
		{"no headers", `{"prompt": "x"}`, hang("")},
		{"headers, then no body", `{"prompt": "x"}`, hang("application/json")},
		{"stream headers, then no event", `{"prompt": "x", "stream": true}`, hang("text/event-stream")},
	}
	const firstByte = 200 * time.Millisecond
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := startFake(t, tc.do), startFake(t, tc.do)
			rt := startRouter(t, Config{Nodes: []string{a.ts.URL, b.ts.URL}, HealthInterval: time.Hour,
				// An idle timeout that would still be waiting when the test gives up: were it the
				// one to bound the first byte, the test fails on took instead of hanging.
				FirstByteTimeout: firstByte, StreamIdleTimeout: 10 * time.Second})
			start := time.Now()
			status, _, body := rt.post("/v1/completions", tc.body)
			took := time.Since(start)
			if status != http.StatusBadGateway || errorCode(body) != "node_failed" {
				t.Fatalf("status %d: %s", status, body)
			}
			if took < 2*firstByte || took > 5*time.Second {
				t.Fatalf("answered after %v: want two first-byte timeouts of %v", took, firstByte)
			}
			if a.calls.Load() != 1 || b.calls.Load() != 1 || rt.counter("retries", "timeout") != 1 {
				t.Fatalf("calls %d and %d, %v timeout retries: want the other node tried once",
					a.calls.Load(), b.calls.Load(), rt.counter("retries", "timeout"))
			}
		})
	}
}

// TestIdleTimeoutAfterTheFirstByte: once a response has started, gaps are bounded by the idle
// timeout alone, not by the (shorter) first-byte timeout, streamed or not.
func TestIdleTimeoutAfterTheFirstByte(t *testing.T) {
	tests := []struct {
		name      string
		stream    bool
		gap, idle time.Duration
		broken    bool
	}{
		{"stream: a gap longer than the first-byte timeout", true, 600 * time.Millisecond, 5 * time.Second, false},
		{"stream: a gap longer than the idle timeout", true, 3 * time.Second, 300 * time.Millisecond, true},
		{"whole: a gap longer than the first-byte timeout", false, 600 * time.Millisecond, 5 * time.Second, false},
		{"whole: a gap longer than the idle timeout", false, 3 * time.Second, 300 * time.Millisecond, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The node sends a first part, waits gap, then the rest.
			first, rest, ct := `{"choices":`, `[]}`, "application/json"
			if tc.stream {
				first, rest = "data: {\"choices\":[{\"text\":\"Once\"}]}\n\n", "data: {\"choices\":[{\"text\":\" upon\"}]}\n\ndata: [DONE]\n\n"
				ct = "text/event-stream"
			}
			f := startFake(t, func(f *fakeNode, w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", ct)
				w.Write([]byte(first))
				http.NewResponseController(w).Flush()
				select {
				case <-time.After(tc.gap):
				case <-r.Context().Done():
					return
				}
				w.Write([]byte(rest))
			})
			rt := startRouter(t, Config{Nodes: []string{f.ts.URL}, HealthInterval: time.Hour,
				FirstByteTimeout: 200 * time.Millisecond, StreamIdleTimeout: tc.idle})
			body := `{"prompt": "x", "stream": ` + strconv.FormatBool(tc.stream) + `}`
			status, _, got := rt.post("/v1/completions", body)
			if !tc.stream {
				// Nothing has reached the client when a whole response stalls: 502, as any failure.
				want, wantBody := http.StatusOK, first+rest
				if tc.broken {
					want, wantBody = http.StatusBadGateway, ""
				}
				if status != want || (wantBody != "" && string(got) != wantBody) || (tc.broken && rt.counter("failures", label(f.ts.URL), "timeout") != 1) {
					t.Fatalf("status %d (want %d): %s", status, want, got)
				}
				return
			}
			ev := events(got)
			want := []string{"Once", "upon", "[DONE]"} // the node's three events
			if tc.broken {
				want = []string{"Once", "sent nothing for 300ms"} // the first, then the router's error event
			}
			if status != http.StatusOK || len(ev) != len(want) {
				t.Fatalf("status %d, events %q", status, ev)
			}
			for i, w := range want {
				if !strings.Contains(ev[i], w) {
					t.Fatalf("event %d is %q, want it to contain %q", i, ev[i], w)
				}
			}
		})
	}
}

// TestOversizedResponse: a non-streamed response over MaxResponseBytes gets 502, is not retried,
// does not count against the node, and the router stops reading it at the limit.
func TestOversizedResponse(t *testing.T) {
	const limit = 1 << 20
	const size = 256 << 20
	tests := []struct {
		name          string
		contentLength bool
	}{
		{"chunked", false},
		{"with a Content-Length", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var written atomic.Int64
			done := make(chan struct{}, 2)
			huge := func(f *fakeNode, w http.ResponseWriter, _ *http.Request) {
				defer func() { done <- struct{}{} }()
				w.Header().Set("Content-Type", "application/json")
				if tc.contentLength {
					w.Header().Set("Content-Length", strconv.Itoa(size))
				}
				chunk := bytes.Repeat([]byte("a"), 64<<10)
				for written.Load() < size {
					n, err := w.Write(chunk)
					written.Add(int64(n))
					if err != nil {
						return
					}
				}
			}
			a, b := startFake(t, huge), startFake(t, huge)
			rt := startRouter(t, Config{Nodes: []string{a.ts.URL, b.ts.URL}, HealthInterval: time.Hour, MaxResponseBytes: limit})
			status, _, body := rt.post("/v1/completions", `{"prompt": "x"}`)
			if status != http.StatusBadGateway || errorCode(body) != "response_too_large" ||
				!strings.Contains(string(body), "--max-response-bytes") {
				t.Fatalf("status %d: %.300s", status, body)
			}
			if calls := a.calls.Load() + b.calls.Load(); calls != 1 {
				t.Fatalf("the nodes got %d requests: an oversized answer was retried", calls)
			}
			if rt.r.Healthy() != 2 || rt.counter("rejected", "response_too_large") != 1 {
				t.Fatal("the oversized answer counted against the node, or was not counted as rejected")
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the node is still writing: the router keeps reading past the limit")
			}
			// What the node got written is the router's reads plus the sockets' buffers (a few
			// MB on loopback), far from the whole body.
			if w := written.Load(); w >= size/4 {
				t.Fatalf("the node wrote %d of %d bytes before the router hung up", w, size)
			}
		})
	}
}

// TestReadCapped checks what readCapped holds and consumes, for bodies around the limit.
func TestReadCapped(t *testing.T) {
	const limit = 10000
	tests := []struct {
		name    string
		size    int
		hint    int64
		tooBig  bool
		maxRead int64 // most bytes readCapped may take from the source
	}{
		{"empty", 0, -1, false, 0},
		{"small, no hint", 100, -1, false, 100},
		{"exactly the limit, no hint", limit, -1, false, limit},
		{"exactly the limit, hinted", limit, limit, false, limit},
		{"one byte over, no hint", limit + 1, -1, true, limit + 1},
		{"far over, no hint", 100 * limit, -1, true, limit + 1},
		{"far over, hinted", 100 * limit, 100 * limit, true, 0},
		{"hint smaller than the body", 3 * limit, 10, true, limit + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := bytes.Repeat([]byte{'x'}, tc.size)
			// iotest-like one-byte-short reads would be slow; a 7-byte-chunk reader exercises
			// partial reads and buffer growth.
			cr := &iocount.Reader{R: &chunky{b: src, k: 7}}
			got, err := readCapped(cr, tc.hint, limit)
			if tc.tooBig != errors.Is(err, errTooLarge) {
				t.Fatalf("err %v, want too large: %v", err, tc.tooBig)
			}
			if cr.N > tc.maxRead {
				t.Fatalf("read %d bytes from the source, at most %d allowed", cr.N, tc.maxRead)
			}
			if tc.tooBig {
				return
			}
			if err != nil || !bytes.Equal(got, src) {
				t.Fatalf("err %v, got %d bytes of %d", err, len(got), len(src))
			}
			if cap(got) > limit {
				t.Fatalf("buffer of %d bytes, over the limit %d", cap(got), limit)
			}
		})
	}
}

// chunky serves b at most k bytes per read.
type chunky struct {
	b []byte
	k int
}

func (c *chunky) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.k)], c.b)
	c.b = c.b[n:]
	return n, nil
}

func TestRetryable(t *testing.T) {
	openAI := errorJSON("server_error", "", "boom")
	tests := []struct {
		name   string
		status int
		body   []byte
		want   bool
	}{
		{"500 from the node's handler", 500, openAI, false},
		{"500 from something else", 500, []byte("<html>oops</html>"), true},
		{"501 from the node's handler", 501, openAI, false},
		{"502", 502, openAI, true},
		{"503 shutting down", 503, openAI, true},
		{"504", 504, nil, true},
		{"error without a message", 500, []byte(`{"error":{}}`), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryable(tc.status, tc.body); got != tc.want {
				t.Fatalf("retryable(%d, %s) = %v", tc.status, tc.body, got)
			}
		})
	}
}
