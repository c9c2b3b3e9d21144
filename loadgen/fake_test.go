package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeServer is an OpenAI-style /v1/completions endpoint streaming fake SSE
// chunks with controlled delays. A request's behaviour is chosen by the first
// word of its prompt:
//
//	ok        first text chunk after shortTTFT, then textChunks-1 more, gap apart
//	long      the same with longTTFT
//	http500   500 with an OpenAI error body
//	reject    429 with an OpenAI error body
//	plain404  404 with a text body
//	errevent  one text chunk, then a data: {"error": ...} event
//	truncate  one text chunk, then the response ends without [DONE]
//	badjson   a data event that is not JSON
//	nostream  200 with a JSON (non-SSE) body
//	hang      one text chunk, then nothing until the client goes away
//
// With model "usage" a final usage chunk reports completion_tokens =
// max_tokens; otherwise no usage is sent. Every stream also carries an
// empty-text chunk in the middle and a final empty one with a
// finish_reason, which must count neither as tokens nor as chunk gaps, and
// an empty chunk right away, which must not count as the first token.
type fakeServer struct {
	shortTTFT, longTTFT, gap time.Duration
	textChunks               int

	mu          sync.Mutex
	bodies      []map[string]any
	prompts     []string
	auth        []string
	paths       []string
	inflight    int
	maxInflight int

	// sent holds, per streamed request, its arrival time followed by the
	// time each text chunk's write began: the latencies the server really
	// produced, for checking the client's measurements against.
	sent []servedStream

	conns atomic.Int32 // new connections accepted
}

func newFake() *fakeServer {
	return &fakeServer{shortTTFT: 30 * time.Millisecond, longTTFT: 80 * time.Millisecond,
		gap: 10 * time.Millisecond, textChunks: 4}
}

// newQuickFake is newFake with 1 ms first tokens (of short requests) and gaps, for tests that
// count rather than time.
func newQuickFake() *fakeServer {
	f := newFake()
	f.shortTTFT, f.gap = time.Millisecond, time.Millisecond
	return f
}

// start serves f on loopback until the test ends.
func (f *fakeServer) start(t *testing.T) *httptest.Server {
	srv := httptest.NewUnstartedServer(f)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var body map[string]any
	var req completionRequest
	if json.Unmarshal(raw, &body) != nil || json.Unmarshal(raw, &req) != nil {
		http.Error(w, `{"error":{"message":"bad body"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.prompts = append(f.prompts, req.Prompt)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.paths = append(f.paths, r.Method+" "+r.URL.Path)
	f.inflight++
	f.maxInflight = max(f.maxInflight, f.inflight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()

	ctx := r.Context()
	sleep := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-ctx.Done():
			return false
		}
	}
	flusher := w.(http.Flusher)
	send := func(data string) {
		fmt.Fprintf(w, "data: %s\n\n", data)
		flusher.Flush()
	}
	text := func(s string) string {
		return fmt.Sprintf(`{"object":"text_completion","choices":[{"index":0,"text":%q,"finish_reason":null}]}`, s)
	}
	sse := func() {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		flusher.Flush()
	}

	mode, _, _ := strings.Cut(req.Prompt, " ")
	switch mode {
	case "ok", "long":
		sse()
		ttft := f.shortTTFT
		if mode == "long" {
			ttft = f.longTTFT
		}
		// An empty chunk ahead of the text must not be taken as the first token.
		send(text(""))
		if !sleep(ttft) {
			return
		}
		times := []time.Time{arrived}
		defer func() {
			f.mu.Lock()
			f.sent = append(f.sent, servedStream{long: mode == "long", times: times})
			f.mu.Unlock()
		}()
		for i := range f.textChunks {
			if i > 0 && !sleep(f.gap) {
				return
			}
			times = append(times, time.Now())
			send(text(fmt.Sprintf("t%d", i)))
			if i == 1 {
				send(text(""))
			}
		}
		send(`{"choices":[{"index":0,"text":"","finish_reason":"length"}]}`)
		if req.Model == "usage" {
			send(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":3}}}`, req.MaxTokens))
		}
		send("[DONE]")
	case "http500":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":{"message":"boom","type":"server_error"}}`)
	case "reject":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"message":"all slots busy"}}`)
	case "plain404":
		http.Error(w, "no such thing", http.StatusNotFound)
	case "errevent":
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8") // parameters are fine
		w.WriteHeader(http.StatusOK)
		send(text("a"))
		send(`{"error":{"code":500,"message":"decode failed"}}`)
	case "truncate":
		sse()
		send(text("a"))
	case "badjson":
		sse()
		send(`{"choices":[`)
		send("[DONE]")
	case "nostream":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"text":"all at once"}]}`)
	case "hang":
		sse()
		send(text("a"))
		<-ctx.Done()
	default:
		http.Error(w, "unknown mode "+mode, http.StatusBadRequest)
	}
}

type servedStream struct {
	long  bool
	times []time.Time
}

// served summarizes the latencies the server produced for complete streams
// since the last call, as the client would measure them with zero latency,
// and forgets them.
func (f *fakeServer) served() (short, long, gaps Percentiles) {
	f.mu.Lock()
	sent := f.sent
	f.sent = nil
	f.mu.Unlock()
	var s, l, g []time.Duration
	for _, st := range sent {
		times := st.times
		if len(times) != f.textChunks+1 {
			continue
		}
		ttft := times[1].Sub(times[0])
		if st.long {
			l = append(l, ttft)
		} else {
			s = append(s, ttft)
		}
		for i := 2; i < len(times); i++ {
			g = append(g, times[i].Sub(times[i-1]))
		}
	}
	return computePercentiles(s), computePercentiles(l), computePercentiles(g)
}

// reqs builds requests whose prompts start with the given modes; the rest of
// each prompt is its index, so that every prompt is distinct.
func reqs(maxTokens int, modes ...string) []Request {
	out := make([]Request, len(modes))
	for i, m := range modes {
		kind := KindShort
		if m == "long" {
			kind = KindLong
		}
		out[i] = Request{Kind: kind, Prompt: fmt.Sprintf("%s %d", m, i), MaxTokens: maxTokens}
	}
	return out
}
