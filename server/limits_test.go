package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startServe runs Serve on a fresh loopback listener until the test ends and returns its address.
func startServe(t *testing.T, h http.Handler, cfg ServeConfig) string {
	t.Helper()
	if cfg.Grace == 0 {
		cfg.Grace = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, served := runServe(t, ctx, h, cfg)
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return addr
}

// runServe runs Serve(ctx, a fresh loopback listener, h, cfg) (a nil cfg.Logger discards) and
// returns the listener's address and where Serve's result arrives.
func runServe(t *testing.T, ctx context.Context, h http.Handler, cfg ServeConfig) (string, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, h, cfg) }()
	return ln.Addr().String(), served
}

// awaitServed fails the test unless Serve's result arrives from served within d and is nil;
// what says when Serve was due to return.
func awaitServed(t *testing.T, served <-chan error, d time.Duration, what string) {
	t.Helper()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve returned %v %s", err, what)
		}
	case <-time.After(d):
		t.Fatalf("Serve did not return within %v %s", d, what)
	}
}

// dial opens a raw TCP connection that fails the test's reads after d.
func dial(t *testing.T, addr string, d time.Duration) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(d))
	t.Cleanup(func() { c.Close() })
	return c
}

// TestEndlessBodyIsCut sends a chunked request body that never ends, one byte every 20ms, over a
// raw TCP connection: the server must answer 408 and close the connection once the body deadline
// passes, instead of holding it (and its file descriptor) forever.
func TestEndlessBodyIsCut(t *testing.T) {
	e := newEnv(t, envOptions{})
	const timeout = 300 * time.Millisecond
	addr := startServe(t, e.srv.Handler(), ServeConfig{ReadTimeout: timeout})
	c := dial(t, addr, 10*time.Second)
	start := time.Now()
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
	fmt.Fprintf(c, "1\r\n{\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := fmt.Fprintf(c, "1\r\n \r\n"); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response after %v: %v", time.Since(start), err)
	}
	answered := time.Since(start)
	body, _ := io.ReadAll(resp.Body) // the server closes: ReadAll ends at EOF, not at our deadline
	closed := time.Since(start)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "request_timeout") {
		t.Fatalf("status %d %s, want 408 request_timeout", resp.StatusCode, body)
	}
	var rest [1]byte
	if n, err := c.Read(rest[:]); err != io.EOF {
		t.Fatalf("the connection is still open after the 408 (read %d, %v)", n, err)
	}
	t.Logf("read deadline %v: 408 after %v, connection closed after %v", timeout, answered.Round(time.Millisecond), closed.Round(time.Millisecond))
	// The server's deadline starts when it reads the connection, a little before start here.
	if answered < timeout-100*time.Millisecond || closed > timeout+2*time.Second {
		t.Fatalf("408 after %v and close after %v with a %v deadline", answered, closed, timeout)
	}
}

// TestBodyDeadlineEndsWithTheBody sends a body slowly but within the read deadline to a handler
// that then works for two deadlines: once the body is in, the deadline must not end the request
// (the server's watch of the idle connection would cancel its context), nor a keep-alive
// request that follows on the same connection.
func TestBodyDeadlineEndsWithTheBody(t *testing.T) {
	const timeout = 400 * time.Millisecond
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			WriteError(w, BadRequest("", "%v", err))
			return
		}
		select {
		case <-r.Context().Done():
			WriteError(w, InternalError(fmt.Errorf("the request was cancelled while it worked: %w", context.Cause(r.Context()))))
		case <-time.After(2 * timeout):
			WriteJSON(w, http.StatusOK, map[string]int{"bytes": len(body)})
		}
	})
	addr := startServe(t, h, ServeConfig{ReadTimeout: timeout})
	c := dial(t, addr, 10*time.Second)
	br := bufio.NewReader(c)
	body := `{"prompt": "Once upon a time", "max_tokens": 400}`
	fmt.Fprintf(c, "POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(body))
	for _, part := range []string{body[:10], body[10:40], body[40:]} {
		time.Sleep(timeout / 8)
		c.Write([]byte(part))
	}
	for i, req := range []string{"", "GET /again HTTP/1.1\r\nHost: x\r\n\r\n"} {
		c.Write([]byte(req))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d %s", i, resp.StatusCode, data)
		}
	}
}

// TestWriteDeadlineCutsAReaderThatStops serves an endless stream to a raw TCP client that never
// reads: once the socket buffers are full the write blocks, and the write deadline must end the
// handler rather than leave it blocked.
func TestWriteDeadlineCutsAReaderThatStops(t *testing.T) {
	const timeout = 200 * time.Millisecond
	ended := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sse := startSSE(w)
		chunk := strings.Repeat("x", 4096)
		for {
			if err := sse.Send(chunk); err != nil {
				ended <- err
				return
			}
		}
	})
	addr := startServe(t, h, ServeConfig{WriteTimeout: timeout})
	c := dial(t, addr, 30*time.Second)
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case err := <-ended:
		t.Logf("the stream to a client that does not read ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler is still writing to a client that reads nothing")
	}
}

// TestConnectionCap fills the connection cap with idle raw connections: the next connection must
// get a 503 at once, and a slot freed by closing one must serve again.
func TestConnectionCap(t *testing.T) {
	const limit = 3
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	addr := startServe(t, h, ServeConfig{MaxConnections: limit})
	get := func(c net.Conn) (*http.Response, []byte, error) {
		fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return nil, nil, err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return resp, body, nil
	}
	held := make([]net.Conn, limit)
	for i := range held {
		held[i] = dial(t, addr, 10*time.Second)
		// A served request proves the connection was accepted and counted.
		if resp, _, err := get(held[i]); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: %v %v", i, resp, err)
		}
	}
	for i := range 5 {
		start := time.Now()
		c := dial(t, addr, 10*time.Second)
		resp, body, err := get(c)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("connection over the cap: %v", err)
		}
		var eb errorBody
		if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &eb) != nil ||
			eb.Error.Code == nil || *eb.Error.Code != "too_many_connections" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("connection over the cap: status %d %s, want 503 too_many_connections with Retry-After", resp.StatusCode, body)
		}
		if i == 0 {
			t.Logf("connection %d over a cap of %d: 503 in %v", limit+1, limit, took.Round(time.Microsecond))
		}
		if took > time.Second {
			t.Fatalf("the 503 took %v", took)
		}
		c.Close()
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := dial(t, addr, 10*time.Second)
		resp, _, err := get(c)
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no connection served after one of the %d was closed: %v %v", limit, resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
