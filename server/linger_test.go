package server

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRefusedBodyIsDrained sends a body over the limit slowly enough that most of it is still
// on its way when the server answers 413, and reads the answer while it sends: the whole body
// must go out without a reset and the 413 must arrive whole (the server drains the rest
// before closing, lingerFactor times the limit at most; without it the client's writes fail
// with ECONNRESET).
func TestRefusedBodyIsDrained(t *testing.T) {
	// Past the limit net/http itself drains 256 KiB; these bodies leave more than that unread.
	const limit = 128 << 10
	e := newEnv(t, envOptions{maxBody: limit})
	addr := startServe(t, e.srv.Handler(), ServeConfig{ReadTimeout: 20 * time.Second})
	for _, c := range []struct {
		name string
		size int
	}{
		{name: "3.5 times the limit", size: 7 * limit / 2},
		{name: "just within the drain", size: lingerFactor*limit + limit/2},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := dial(t, addr, 15*time.Second)
			fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", c.size)
			sent := make(chan error, 1)
			go func() {
				chunk := []byte(`{"prompt":"` + strings.Repeat("a", 8192-11))
				left := c.size
				for left > 0 {
					n := min(left, len(chunk))
					if _, err := conn.Write(chunk[:n]); err != nil {
						sent <- fmt.Errorf("after %d of %d bytes: %w", c.size-left, c.size, err)
						return
					}
					left -= n
					time.Sleep(15 * time.Millisecond) // the rest still in flight long after the 413
				}
				sent <- nil
			}()
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no response: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("reading the 413's body: %v", err)
			}
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "request_too_large") {
				t.Fatalf("status %d %s, want 413 request_too_large", resp.StatusCode, body)
			}
			if err := <-sent; err != nil {
				t.Fatalf("sending the body: %v (the connection was reset before the server drained it)", err)
			}
		})
	}
}
