package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestLiveStreamCap: GET /live streams beyond MaxLiveStreams get a 503 at once, admitted streams
// do not count against the connection cap (the API keeps its whole budget, which still applies),
// and a stream that ends frees its place.
func TestLiveStreamCap(t *testing.T) {
	e := newEnv(t, envOptions{live: true})
	live := e.srv.cfg.Live
	srv, err := New(Config{Model: e.model, Engine: e.eng, Dialects: testDialects, Live: live, MaxLiveStreams: 2, ModelID: "stories"})
	if err != nil {
		t.Fatal(err)
	}
	const maxConns = 3
	addr := startServe(t, srv.Handler(), ServeConfig{MaxConnections: maxConns})
	t.Cleanup(live.Close) // before Serve stops (cleanups run last first): streams must end
	// get sends GET path on c and reads the response head; for a stream, its first event too.
	get := func(c net.Conn, br *bufio.Reader, path string) (*http.Response, string) {
		t.Helper()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		if resp.StatusCode == http.StatusOK && path == "/live" {
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			readLive(t, sc, func(LiveSnapshot) bool { return true })
			return resp, ""
		}
		defer resp.Body.Close()
		var eb errorBody
		if json.NewDecoder(resp.Body).Decode(&eb) == nil && eb.Error.Code != nil {
			return resp, *eb.Error.Code
		}
		return resp, ""
	}
	type conn struct {
		c  net.Conn
		br *bufio.Reader
	}
	open := func() conn {
		c := dial(t, addr, 30*time.Second)
		return conn{c, bufio.NewReader(c)}
	}
	var conns []conn
	for _, tc := range []struct {
		name, path string
		status     int
		code       string
		retry      bool // the refused stream's connection may take a moment to give its slot back
	}{
		{"first stream", "/live", 200, "", false},
		{"second stream", "/live", 200, "", false},
		{"a stream over the cap", "/live", 503, "too_many_live_streams", false},
		{"an API connection", "/health", 200, "", true},
		{"a second one", "/health", 200, "", true},
		{"a third, the connection cap", "/health", 200, "", true},
		{"an API connection over the cap", "/health", 503, "too_many_connections", false},
	} {
		deadline := time.Now().Add(2 * time.Second)
		for {
			cc := open()
			start := time.Now()
			resp, code := get(cc.c, cc.br, tc.path)
			if tc.retry && code == "too_many_connections" && time.Now().Before(deadline) {
				cc.c.Close()
				time.Sleep(10 * time.Millisecond)
				continue
			}
			conns = append(conns, cc)
			if resp.StatusCode != tc.status || code != tc.code {
				t.Fatalf("%s: GET %s: %d %q, want %d %q", tc.name, tc.path, resp.StatusCode, code, tc.status, tc.code)
			}
			if tc.path == "/live" && !resp.Close {
				t.Errorf("%s: the connection stays open after the stream (no Connection: close)", tc.name)
			}
			if tc.code == "too_many_live_streams" && (resp.Header.Get("Retry-After") == "" || time.Since(start) > time.Second) {
				t.Errorf("%s: Retry-After %q after %v", tc.name, resp.Header.Get("Retry-After"), time.Since(start))
			}
			break
		}
	}
	if n := live.streams.Load(); n != 2 {
		t.Fatalf("%d streams counted, want 2", n)
	}
	// End the first stream and free an API connection: a new stream is admitted again.
	conns[0].c.Close()
	conns[len(conns)-2].c.Close() // the third API connection
	deadline := time.Now().Add(5 * time.Second)
	for {
		cc := open()
		fmt.Fprintf(cc.c, "GET /live HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(cc.br, nil)
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		cc.c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no stream admitted after one ended: %v %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
