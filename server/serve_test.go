package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"ubatch/internal/testkit"
)

// TestServeGracefulShutdown cancels Serve's context while a stream is running: the stream must
// still finish, new connections must be refused, and Serve must return nil.
func TestServeGracefulShutdown(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, served := runServe(t, ctx, e.srv.Handler(), ServeConfig{Grace: 10 * time.Second})
	url := "http://" + addr

	body := `{"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": true, "stream": true}`
	resp, err := e.Client.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
	}
	cancel() // as SIGTERM does in `ubatch serve`
	chunks, done := 1, false
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "data: [DONE]":
			done = true
		case strings.HasPrefix(line, "data: "):
			chunks++
		}
	}
	if !done || chunks < 150 {
		t.Fatalf("the in-flight stream was cut: %d chunks, [DONE] %v, err %v", chunks, done, sc.Err())
	}
	awaitServed(t, served, 10*time.Second, "after a graceful shutdown")
	c := &http.Client{Timeout: 2 * time.Second}
	if r, err := c.Get(url + "/health"); err == nil {
		r.Body.Close()
		t.Fatal("the server still accepts requests after shutdown")
	}
}

// TestServeGraceExpires gives in-flight requests no time: Serve must cut them, a stream with an
// error event (not silence, not [DONE]) and a plain request with a 503, and their sequences must
// be cancelled, freeing their KV blocks.
func TestServeGraceExpires(t *testing.T) {
	// Room for both requests' whole growth, which the admission watermark sets aside.
	e := newEnv(t, envOptions{nCtx: 1024})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, served := runServe(t, ctx, e.srv.Handler(), ServeConfig{Grace: time.Millisecond})
	url := "http://" + addr
	long := `{"prompt": "Once upon a time", "max_tokens": 450, "ignore_eos": true, "stream": %v}`
	resp, err := e.Client.Post(url+"/v1/completions", "application/json", strings.NewReader(fmt.Sprintf(long, true)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
	}
	plain := make(chan *http.Response, 1)
	go func() {
		r, err := e.Client.Post(url+"/v1/completions", "application/json", strings.NewReader(fmt.Sprintf(long, false)))
		if err != nil {
			t.Error(err)
		}
		plain <- r
	}()
	testkit.Eventually(t, 5*time.Second, "both requests to run", func() bool { return e.eng.Stats().Running == 2 })
	start := time.Now()
	cancel()
	awaitServed(t, served, 10*time.Second, "after its grace period")
	t.Logf("Serve returned %v after its context ended (grace 1ms)", time.Since(start).Round(time.Millisecond))
	var last string
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			last = line
		}
	}
	if last == "data: [DONE]" {
		t.Fatal("the stream completed although the grace period had expired")
	}
	var body errorBody
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "data: ")), &body); err != nil || body.Error.Code == nil || *body.Error.Code != "shutting_down" {
		t.Fatalf("the cut stream ended with %q, want an error event with code shutting_down", last)
	}
	if r := <-plain; r != nil {
		defer r.Body.Close()
		checkError(t, r, http.StatusServiceUnavailable, "server_error")
	}
	testkit.Eventually(t, 5*time.Second, "the cut requests' KV blocks to be freed", func() bool { return e.kvUsed() == 0 })
}
