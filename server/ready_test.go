package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"ubatch/internal/testkit"
)

// ready GETs base+"/ready" and returns its status and body.
func ready(t *testing.T, c *http.Client, base string) (int, readyBody) {
	t.Helper()
	resp, err := c.Get(base + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b readyBody
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatalf("/ready body: %v", err)
	}
	return resp.StatusCode, b
}

// fillQueue starts a long stream (admitted: the one running place) and a second one (queued:
// the one waiting place) on base, with key as the bearer token when set; cancel ends both.
func fillQueue(t *testing.T, c *http.Client, base, model, key string) (cancel func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"model":"` + model + `","prompt":"Once upon a time","max_tokens":400,"ignore_eos":true,"stream":true}`
	for i := range 2 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := c.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			cancel()
			t.Fatalf("stream %d: status %d", i, resp.StatusCode)
		}
		if i == 0 {
			readChunks(t, resp.Body, 1) // admitted and generating before the second queues
		}
	}
	return cancel
}

// TestReadyFollowsTheQueue: /ready is 200 while a request would be queued and 503 "busy" with
// Retry-After while the queue is full, and /health stays 200 throughout (the node is alive).
// Both answer without the API key.
func TestReadyFollowsTheQueue(t *testing.T) {
	e := newEnv(t, envOptions{maxRunning: 1, maxQueue: 1, apiKey: "k"})
	if code, b := ready(t, e.Client, e.URL); code != http.StatusOK || b.Status != "ready" {
		t.Fatalf("idle /ready: %d %+v, want 200 ready", code, b)
	}
	cancel := fillQueue(t, e.Client, e.URL, "stories", "k")
	defer cancel()
	testkit.Eventually(t, 5*time.Second, "the queue to fill", func() bool { return !e.eng.Accepting() })
	code, b := ready(t, e.Client, e.URL)
	if code != http.StatusServiceUnavailable || b.Status != "busy" || !slices.Equal(b.Full, []string{"stories"}) {
		t.Fatalf("full queue /ready: %d %+v, want 503 busy [stories]", code, b)
	}
	if resp, err := e.Client.Get(e.URL + "/health"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/health while busy: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	cancel()
	testkit.Eventually(t, 10*time.Second, "/ready back to 200", func() bool {
		code, _ := ready(t, e.Client, e.URL)
		return code == http.StatusOK
	})
}

// TestFrontReady: a NewMulti front (serve -m, the chart's nodes) is ready with no model loaded
// (a request loads one) and while its model queues requests, and busy when every loaded
// model's queue is full.
func TestFrontReady(t *testing.T) {
	e := newMultiEnv(t, multiOptions{one: true, maxQueue: 1})
	if code, b := ready(t, e.client, e.ts.URL); code != http.StatusOK || b.Status != "ready" {
		t.Fatalf("nothing loaded: /ready %d %+v, want 200 ready", code, b)
	}
	cancel := fillQueue(t, e.client, e.ts.URL, "alpha", "")
	defer cancel()
	testkit.Eventually(t, 10*time.Second, "/ready to say busy", func() bool {
		code, b := ready(t, e.client, e.ts.URL)
		return code == http.StatusServiceUnavailable && slices.Equal(b.Full, []string{"alpha"})
	})
	cancel()
	testkit.Eventually(t, 10*time.Second, "/ready back to 200", func() bool {
		code, _ := ready(t, e.client, e.ts.URL)
		return code == http.StatusOK
	})
}
