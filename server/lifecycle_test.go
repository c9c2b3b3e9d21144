package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"ubatch/internal/testkit"
)

// TestEngineShutdown checks what clients see when the engine stops: a running stream ends with
// an error event (no [DONE]), and new requests get 503.
func TestEngineShutdown(t *testing.T) {
	e := newEnv(t, envOptions{})
	resp := e.Post(context.Background(), "/v1/completions", map[string]any{
		"prompt": "Once upon a time", "max_tokens": 450, "ignore_eos": true, "stream": true,
	})
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatal("no first event")
	}
	e.stopEngine()
	var last string
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			last = line
		}
	}
	var body errorBody
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "data: ")), &body); err != nil || body.Error.Code == nil || *body.Error.Code != "shutting_down" {
		t.Fatalf("last event %q: want an error event with code shutting_down", last)
	}
	after := e.Post(context.Background(), "/v1/completions", map[string]any{"prompt": "x", "max_tokens": 2})
	defer after.Body.Close()
	checkError(t, after, http.StatusServiceUnavailable, "server_error")
}

// TestPriorityOrdersTheQueue holds the single sequence slot with one request, queues a low then
// a high priority request, and checks that the high one is served first (it preempts the
// normal-priority holder of the slot; the low one waits).
func TestPriorityOrdersTheQueue(t *testing.T) {
	e := newEnv(t, envOptions{maxRunning: 1})
	ctx, cancel := context.WithCancel(context.Background())
	blocker := e.Post(ctx, "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 450, "ignore_eos": true, "stream": true})
	defer blocker.Body.Close()
	readChunks(t, blocker.Body, 1)
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	// The low request is long, so that served in the wrong order the high one would end last by
	// a wide margin, and served right it ends first by one.
	for i, p := range []any{"low", "high"} {
		body := map[string]any{"prompt": "The cat sat", "max_tokens": 8, "priority": p, "ignore_eos": true}
		if p == "low" {
			body["max_tokens"] = 200
		}
		wg.Go(func() {
			raw, _ := json.Marshal(body)
			resp, err := e.Client.Post(e.URL+"/v1/completions", "application/json", strings.NewReader(string(raw)))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			order = append(order, strings.TrimSpace(string(mustJSON(p))))
			mu.Unlock()
		})
		// The low one must be waiting before the high one comes.
		if i == 0 {
			testkit.Eventually(t, 5*time.Second, "the request to queue", func() bool { return e.eng.Stats().Waiting >= 1 })
		}
	}
	// The blocker may go only once the high one has arrived (two wait: low and high, or low and
	// the blocker it preempted) or is done already; else the low one could take the slot first.
	testkit.Eventually(t, 5*time.Second, "the high request to arrive", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) > 0 || e.eng.Stats().Waiting >= 2
	})
	cancel()
	wg.Wait()
	if len(order) != 2 || order[0] != `"high"` {
		t.Fatalf("completion order %v: the high-priority request should finish before the low one", order)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestLenientRequests checks that fields OpenAI clients send but ubatch does not use are ignored,
// and that /v1 requests without a temperature sample (OpenAI's default is 1, not greedy).
func TestLenientRequests(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.Complete(map[string]any{"prompt": "The cat", "max_tokens": 4, "user": "u1", "cache_prompt": false,
		"suffix": nil, "best_of": 1, "response_format": map[string]any{"type": "text"}, "model": "whatever"})
	if res.Model != "stories" || len(res.Choices) != 1 {
		t.Fatalf("response %+v", res)
	}
	defaults := e.Complete(map[string]any{"prompt": "The cat"})
	const maxTokensDefault = 16 // OpenAI's (server/openai's)
	if defaults.Usage.CompletionTokens > maxTokensDefault {
		t.Fatalf("%d tokens without max_tokens; OpenAI's default is %d", defaults.Usage.CompletionTokens, maxTokensDefault)
	}
	texts := map[string]bool{}
	for seed := range 4 {
		r := e.Complete(map[string]any{"prompt": "The cat", "max_tokens": 16, "seed": seed})
		texts[r.Choices[0].Text] = true
	}
	if len(texts) < 2 {
		t.Fatalf("4 seeds without temperature gave one text: the /v1 default is not sampling")
	}
}
