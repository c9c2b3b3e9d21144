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
	"testing"
	"time"
	"unicode/utf8"

	"ubatch/internal/sse"
	"ubatch/internal/testkit"
)

var storyPrompts = []string{
	"Once upon a time", "The cat sat", "Lily and Tom went", "One day, a little",
	"There was a big dog", "The sun was hot", "Sam liked to", "In the park, the",
}

// singles returns each prompt's greedy completion, run alone.
func (e *testEnv) singles(prompts []string, maxTokens int, extra map[string]any) []string {
	e.T.Helper()
	out := make([]string, len(prompts))
	for i, p := range prompts {
		body := map[string]any{"prompt": p, "max_tokens": maxTokens, "temperature": 0}
		for k, v := range extra {
			body[k] = v
		}
		res := e.Complete(body)
		out[i] = res.Choices[0].Text
	}
	return out
}

// concurrently streams every prompt at once and returns their texts.
func (e *testEnv) concurrently(t *testing.T, prompts []string, maxTokens int, extra map[string]any) []string {
	t.Helper()
	texts := make([]string, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() {
			body := map[string]any{"prompt": p, "max_tokens": maxTokens, "temperature": 0}
			for k, v := range extra {
				body[k] = v
			}
			text, _, chunks, err := streamText(context.Background(), e.Client, e.URL, body)
			if err != nil {
				t.Errorf("prompt %d: %v", i, err)
				return
			}
			for _, c := range chunks {
				if !utf8.ValidString(c) {
					t.Errorf("prompt %d: chunk %q splits a UTF-8 character", i, c)
				}
			}
			texts[i] = text
		})
	}
	wg.Wait()
	return texts
}

func TestConcurrentGreedyStreamsMatchSingle(t *testing.T) {
	e := newEnv(t, envOptions{nSeq: 8})
	want := e.singles(storyPrompts, 40, nil)
	got := e.concurrently(t, storyPrompts, 40, nil)
	for i := range storyPrompts {
		if got[i] != want[i] {
			t.Errorf("prompt %q: concurrent stream\n%q\ndiffers from the single request\n%q", storyPrompts[i], got[i], want[i])
		}
	}
	if st := e.eng.Stats(); st.Generated == 0 {
		t.Fatalf("engine generated nothing: %+v", st)
	}
}

// TestPreemptionKeepsOutputs runs 4 concurrent 60-token generations in a 128-cell KV cache, which
// cannot hold them all: the engine must preempt and recompute, and greedy outputs must not change.
// Admission sets aside each running sequence's expected growth, which it takes from the mean
// completion seen so far: short requests first make it expect far less than 60 tokens, so it
// admits more than fits and has to preempt.
func TestPreemptionKeepsOutputs(t *testing.T) {
	e := newEnv(t, envOptions{nCtx: 128, nSeq: 4})
	prompts := storyPrompts[:4]
	extra := map[string]any{"ignore_eos": true}
	want := e.singles(prompts, 60, extra)
	for range 30 {
		e.Complete(map[string]any{"prompt": "Tom", "max_tokens": 1})
	}
	before := e.eng.Stats().Preemptions
	got := e.concurrently(t, prompts, 60, extra)
	for i := range prompts {
		if got[i] != want[i] {
			t.Errorf("prompt %q: under preemption\n%q\nwant\n%q", prompts[i], got[i], want[i])
		}
	}
	after := e.eng.Stats().Preemptions
	if after <= before {
		t.Fatalf("no preemption happened (%d -> %d): the test does not exercise it", before, after)
	}
	if m := metricValue(t, e.metrics.preemptions); m != float64(after) {
		t.Fatalf("ubatch_preemptions_total = %v, engine counted %d", m, after)
	}
	testkit.Eventually(t, 5*time.Second, "KV blocks to be released", func() bool { return e.kvUsed() == 0 })
}

// readChunks reads n data events from an SSE body.
func readChunks(t *testing.T, body io.Reader, n int) {
	t.Helper()
	sc := sse.NewReader(body, 1<<20)
	for got := 0; got < n; got++ {
		if !sc.Next() {
			t.Fatalf("stream ended after %d chunks: %v", got, sc.Err())
		}
	}
}

func TestClientDisconnectFreesKV(t *testing.T) {
	e := newEnv(t, envOptions{})
	base := e.kvUsed()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := e.Post(ctx, "/v1/completions", map[string]any{
		"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true, "temperature": 0, "stream": true,
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	readChunks(t, resp.Body, 5)
	if used := e.kvUsed(); used <= base {
		t.Fatalf("KV used %d while streaming, baseline %d: the sequence holds no blocks?", used, base)
	}
	cancel()
	resp.Body.Close()
	testkit.Eventually(t, 5*time.Second, "KV blocks back to the baseline", func() bool { return e.kvUsed() == base })
	testkit.Eventually(t, 5*time.Second, "the cancellation to be counted", func() bool {
		return metricValue(t, e.metrics.requests.WithLabelValues("cancelled")) == 1
	})
	if st := e.eng.Stats(); st.Generated >= 400 {
		t.Fatalf("generated %d tokens: the sequence ran to the end despite the disconnect", st.Generated)
	}
}

func TestQueueFullReturns429(t *testing.T) {
	e := newEnv(t, envOptions{maxRunning: 1, maxQueue: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := map[string]any{"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true, "stream": true}
	running := e.Post(ctx, "/v1/completions", long)
	defer running.Body.Close()
	readChunks(t, running.Body, 1) // admitted and generating
	queued := e.Post(ctx, "/v1/completions", long)
	defer queued.Body.Close()
	if queued.StatusCode != http.StatusOK {
		t.Fatalf("second request: status %d, want 200 (queued)", queued.StatusCode)
	}
	resp := e.Post(context.Background(), "/v1/completions", map[string]any{"prompt": "The cat", "max_tokens": 4})
	defer resp.Body.Close()
	checkError(t, resp, http.StatusTooManyRequests, "rate_limit_error")
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After %q, want 1", ra)
	}
	if got := metricValue(t, e.metrics.rejected); got != 1 {
		t.Fatalf("ubatch_requests_rejected_total = %v, want 1", got)
	}
	cancel()
	testkit.Eventually(t, 5*time.Second, "KV blocks released", func() bool { st := e.eng.Stats(); return st.KV.Used == 0 && st.Running == 0 && st.Waiting == 0 })
}

func TestPrefixCacheServesRepeatedPrompt(t *testing.T) {
	e := newEnv(t, envOptions{})
	var sb strings.Builder
	for i := range 30 {
		fmt.Fprintf(&sb, "Tom had %s. ", []string{"a red ball", "a big dog", "a small cat"}[i%3])
	}
	body := map[string]any{"prompt": sb.String(), "max_tokens": 12, "temperature": 0}
	st0 := e.eng.Stats()
	first := e.Complete(body)
	st1 := e.eng.Stats()
	second := e.Complete(body)
	st2 := e.eng.Stats()
	n := first.Usage.PromptTokens
	if n < 100 {
		t.Fatalf("prompt is only %d tokens; the test wants a long one", n)
	}
	if first.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("first request reports %d cached tokens, want 0", first.Usage.PromptTokensDetails.CachedTokens)
	}
	cached := second.Usage.PromptTokensDetails.CachedTokens
	if cached < n-16 {
		t.Fatalf("second request reused %d of %d prompt tokens; want all full blocks", cached, n)
	}
	computed1, computed2 := st1.PromptComputed-st0.PromptComputed, st2.PromptComputed-st1.PromptComputed
	if computed2 >= computed1 || int(computed2) != n-cached {
		t.Fatalf("prompt tokens computed: %d then %d (cached %d of %d)", computed1, computed2, cached, n)
	}
	if first.Choices[0].Text != second.Choices[0].Text {
		t.Fatalf("cached prompt changed the output: %q vs %q", first.Choices[0].Text, second.Choices[0].Text)
	}
	if hits := metricValue(t, e.metrics.prefixHitTokens); hits != float64(cached) {
		t.Fatalf("ubatch_prefix_cache_hit_tokens_total = %v, want %d", hits, cached)
	}
	if ratio := metricValue(t, e.metrics.prefixHitRatio); ratio <= 0 || ratio >= 1 {
		t.Fatalf("ubatch_prefix_cache_hit_ratio = %v", ratio)
	}
}

// TestBurstWithDisconnectsLeaksNothing sends 200 requests, some streaming, with clients that go
// away at random points, and checks that goroutines and KV blocks return to their baseline.
func TestBurstWithDisconnectsLeaksNothing(t *testing.T) {
	e := newEnv(t, envOptions{nSeq: 8, maxQueue: 256})
	e.Complete(map[string]any{"prompt": "warm up", "max_tokens": 2})
	e.Client.CloseIdleConnections()
	time.Sleep(50 * time.Millisecond)
	baseG := runtime.NumGoroutine()
	rng := rand.New(rand.NewPCG(1, 2))
	type job struct {
		stream     bool
		cancelWait time.Duration // 0: read to the end
		prompt     string
		maxTokens  int
	}
	longest := 40
	if raceEnabled {
		longest = 12
	}
	jobs := make([]job, 200)
	for i := range jobs {
		jobs[i] = job{stream: rng.IntN(2) == 0, prompt: storyPrompts[rng.IntN(len(storyPrompts))], maxTokens: 4 + rng.IntN(longest)}
		if rng.IntN(3) == 0 {
			jobs[i].cancelWait = time.Duration(rng.IntN(30)) * time.Millisecond
		}
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if j.cancelWait > 0 {
				time.AfterFunc(j.cancelWait, cancel)
			}
			body := fmt.Sprintf(`{"prompt": %q, "max_tokens": %d, "stream": %v, "ignore_eos": true}`, j.prompt, j.maxTokens, j.stream)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+"/v1/completions", strings.NewReader(body))
			resp, err := e.Client.Do(req)
			if err != nil {
				if j.cancelWait == 0 {
					t.Errorf("request failed: %v", err)
				}
				return
			}
			defer resp.Body.Close()
			_, err = io.Copy(io.Discard, resp.Body)
			if err != nil && j.cancelWait == 0 {
				t.Errorf("reading: %v", err)
			}
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for code, n := range statuses {
		if code != http.StatusOK {
			t.Errorf("%d responses with status %d", n, code)
		}
	}
	if t.Failed() {
		t.Fatalf("engine state after the failed burst: %+v", e.eng.Stats())
	}
	e.waitSettled(t, e.Client, baseG, 0)
}

// waitSettled waits until the engine runs and queues nothing, exactly baseKV KV blocks are in use
// and the goroutine count is back to baseG (give or take two of the runtime's own), closing
// client's idle connections first so that their goroutines on both sides go away. It fails the
// test after 10 s, with every goroutine's stack when they are what leaked, and returns how long it
// waited.
func (e *testEnv) waitSettled(t *testing.T, client *http.Client, baseG, baseKV int) time.Duration {
	t.Helper()
	start := time.Now()
	testkit.Eventually(t, 10*time.Second, "KV blocks and sequences released", func() bool {
		st := e.eng.Stats()
		return st.KV.Used == baseKV && st.Running == 0 && st.Waiting == 0
	})
	client.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseG+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("goroutines: %d before, %d after\n%s", baseG, runtime.NumGoroutine(), buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}
