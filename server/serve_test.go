package server

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeGracefulShutdown cancels Serve's context while a stream is running: the stream must
// still finish, new connections must be refused, and Serve must return nil.
func TestServeGracefulShutdown(t *testing.T) {
	e := newEnv(t, envOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, e.srv.Handler(), 10*time.Second, slog.New(slog.DiscardHandler)) }()
	url := "http://" + ln.Addr().String()

	body := `{"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": true, "stream": true}`
	resp, err := e.client.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
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
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve returned %v after a graceful shutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	c := &http.Client{Timeout: 2 * time.Second}
	if r, err := c.Get(url + "/health"); err == nil {
		r.Body.Close()
		t.Fatal("the server still accepts requests after shutdown")
	}
}

// TestServeGraceExpires gives in-flight requests no time: Serve must close their connections,
// which cancels their sequences and frees their KV blocks.
func TestServeGraceExpires(t *testing.T) {
	e := newEnv(t, envOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, e.srv.Handler(), time.Millisecond, slog.New(slog.DiscardHandler)) }()
	body := `{"prompt": "Once upon a time", "max_tokens": 450, "ignore_eos": true, "stream": true}`
	resp, err := e.client.Post("http://"+ln.Addr().String()+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its grace period")
	}
	for sc.Scan() {
		if sc.Text() == "data: [DONE]" {
			t.Fatal("the stream completed although the grace period had expired")
		}
	}
	waitFor(t, 5*time.Second, "the cut stream's KV blocks to be freed", func() bool { return e.kvUsed() == 0 })
}
