package server

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ubatch/internal/sse"
)

// malformedBodies are request bodies every route must refuse with a 400 before any generation.
var malformedBodies = []string{
	`{"prompt": "Once upon a ti`,
	`{"prompt": 42, "stream": true}`,
	`{"prompt": "The cat", "top_p": 7, "stream": true}`,
	`{"prompt": "The cat", "temperature": "hot", "stream": true}`,
	`{"prompt": "The cat", "n": 100000, "stream": true}`,
	`[1, 2, 3]`,
	``,
	`{"messages": "hello", "stream": true}`,
}

// soakJob is one request of the soak test.
type soakJob struct {
	path, body string
	malformed  bool
	// A client that goes away: after cutAfter data events when > 0, else after cutTimer (which may
	// fire before the response arrives). Both zero: read the whole stream.
	cutAfter int
	cutTimer time.Duration
}

func (j soakJob) disconnects() bool { return j.cutAfter > 0 || j.cutTimer > 0 }

// soakJobs draws n streaming requests over the three streaming routes: 10% malformed, 30% whose
// client disconnects at a random point.
func soakJobs(rng *rand.Rand, n, maxTokens int) []soakJob {
	jobs := make([]soakJob, n)
	for i := range jobs {
		p := storyPrompts[rng.IntN(len(storyPrompts))]
		tokens := 4 + rng.IntN(maxTokens)
		j := &jobs[i]
		switch rng.IntN(3) {
		case 0:
			j.path, j.body = "/v1/completions", fmt.Sprintf(`{"prompt": %q, "max_tokens": %d, "stream": true, "ignore_eos": true}`, p, tokens)
		case 1:
			j.path, j.body = "/v1/chat/completions", fmt.Sprintf(`{"messages": [{"role": "user", "content": %q}], "max_tokens": %d, "stream": true, "ignore_eos": true}`, p, tokens)
		default:
			j.path, j.body = "/completion", fmt.Sprintf(`{"prompt": %q, "n_predict": %d, "stream": true, "ignore_eos": true}`, p, tokens)
		}
		switch r := rng.IntN(100); {
		case r < 10:
			j.malformed, j.body = true, malformedBodies[rng.IntN(len(malformedBodies))]
		case r < 25:
			j.cutAfter = 1 + rng.IntN(tokens)
		case r < 40:
			j.cutTimer = time.Duration(1+rng.IntN(20)) * time.Millisecond
		}
	}
	return jobs
}

// soakResult counts what the clients saw.
type soakResult struct {
	completed, refused, cut, events atomic.Int64
}

// run sends one job and checks what the client sees: a 400 for a malformed body, a whole stream
// (ending in [DONE], or llama.cpp's stop object) for the others unless the client went away.
func (j soakJob) run(t *testing.T, client *http.Client, url string, res *soakResult) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if j.cutTimer > 0 {
		time.AfterFunc(j.cutTimer, cancel)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+j.path, strings.NewReader(j.body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if j.disconnects() {
			res.cut.Add(1)
			return
		}
		t.Errorf("%s %s: %v", j.path, j.body, err)
		return
	}
	defer resp.Body.Close()
	if j.malformed {
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("malformed body %q: status %d %s, want 400", j.body, resp.StatusCode, data)
		}
		res.refused.Add(1)
		return
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		t.Errorf("%s %s: status %d %s", j.path, j.body, resp.StatusCode, data)
		return
	}
	sc := sse.NewReader(resp.Body, 1<<20)
	events, last := 0, ""
	for sc.Next() {
		events++
		last = sc.Text()
		if events == j.cutAfter {
			cancel()
			break
		}
	}
	res.events.Add(int64(events))
	if j.disconnects() {
		res.cut.Add(1)
		return
	}
	ended := last == "[DONE]" || j.path == "/completion" && strings.Contains(last, `"stop":true`)
	if sc.Err() != nil || !ended {
		t.Errorf("%s %s: stream of %d events ended with %q (%v)", j.path, j.body, events, last, sc.Err())
		return
	}
	res.completed.Add(1)
}

// TestSoak runs 200 streaming requests, 16 at a time, against a real server over real HTTP (Serve
// with its deadlines and connection cap, on a TCP listener): 10% with malformed bodies and 30%
// whose clients disconnect at random points. Afterwards nothing may remain: no running or waiting
// sequence, the KV blocks in use back to the baseline (cached prefix blocks may stay: they are
// not in use), and the goroutines of both sides back to their starting count.
func TestSoak(t *testing.T) {
	e := newEnv(t, envOptions{nSeq: 8, maxQueue: 256})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 60 * time.Second}
	url := "http://" + startServe(t, e.srv.Handler(), ServeConfig{MaxConnections: 64})

	// Warm up (first-use allocations, the prefix cache), then take the baselines.
	soakJob{path: "/v1/completions", body: `{"prompt": "warm up", "max_tokens": 2, "stream": true}`}.run(t, client, url, &soakResult{})
	client.CloseIdleConnections()
	time.Sleep(50 * time.Millisecond)
	baseKV := e.kvUsed()
	baseG := runtime.NumGoroutine()
	before := e.eng.Stats()

	maxTokens := 100
	if raceEnabled {
		maxTokens = 24
	}
	jobs := soakJobs(rand.New(rand.NewPCG(14, 2026)), 200, maxTokens)
	var res soakResult
	start := time.Now()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			j.run(t, client, url, &res)
		})
	}
	wg.Wait()
	took := time.Since(start)
	if t.Failed() {
		t.Fatalf("engine state after the failed soak: %+v", e.eng.Stats())
	}
	settle := e.waitSettled(t, client, baseG, baseKV)
	st := e.eng.Stats()
	t.Logf("%d requests in %v: %d streams complete, %d malformed bodies refused, %d clients gone; %d events read, "+
		"%d tokens generated, %d preemptions", len(jobs), took.Round(time.Millisecond), res.completed.Load(), res.refused.Load(),
		res.cut.Load(), res.events.Load(), st.Generated-before.Generated, st.Preemptions-before.Preemptions)
	t.Logf("settled in %v: running %d, waiting %d, KV blocks in use %d (baseline %d, %d cached of %d), goroutines %d (baseline %d)",
		settle.Round(time.Millisecond), st.Running, st.Waiting, st.KV.Used, baseKV, st.KV.Cached, st.KV.Total, runtime.NumGoroutine(), baseG)
	if n := res.completed.Load() + res.refused.Load() + res.cut.Load(); n != int64(len(jobs)) {
		t.Fatalf("%d of %d requests accounted for", n, len(jobs))
	}
	if res.refused.Load() == 0 || res.cut.Load() == 0 {
		t.Fatalf("the mix has no malformed bodies or no disconnects: the test proves nothing")
	}
	if st.KV.Used+st.KV.Cached+st.KV.Free != st.KV.Total {
		t.Fatalf("KV blocks do not add up: %+v", st.KV)
	}
}
