package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// The parse attacks of issue 32: megabytes of text a request brings to be tokenized or
// rendered, sent many at once. Each must be refused with a 4xx (or served) while the process
// stays under hostileBurstRSS and /health answers within hostileProbe throughout.

const (
	hostileBurstRSS = 1536 << 20 // the bound: 1.5 GB
	hostileProbe    = time.Second
)

// bigPrompt is the 4.2 MB completion: "ab " 1,390,000 times (under the nodes' 4 MiB
// --max-body).
func bigPrompt() []byte {
	b, _ := json.Marshal(map[string]any{"prompt": strings.Repeat("ab ", 1_390_000), "max_tokens": 1})
	return b
}

// bigChat is the chat of 100,000 short messages (3.4 MB).
func bigChat() []byte {
	msgs := make([]map[string]string, 100_000)
	for i := range msgs {
		msgs[i] = map[string]string{"role": "user", "content": "hello"}
	}
	b, _ := json.Marshal(map[string]any{"messages": msgs, "max_tokens": 1})
	return b
}

// burstRow is one parse attack: n copies of body sent at once to path.
type burstRow struct {
	name string
	path string
	body []byte
	n    int
}

func parseBurstRows() []burstRow {
	return []burstRow{
		{name: "16 concurrent 4.2 MB prompts", path: "/v1/completions", body: bigPrompt(), n: 16},
		{name: "24 concurrent chats of 100000 messages", path: "/v1/chat/completions", body: bigChat(), n: 24},
	}
}

// burst sends row to base and checks, while it runs, the resident memory of watch (sampled
// every 50 ms) and the /health of probes (every 100 ms): every answer a 4xx or a 200, the
// peak RSS under hostileBurstRSS, every probe a 200 within hostileProbe, every process alive.
func burst(t *testing.T, base string, row burstRow, watch []*proc, probes []string) {
	start := time.Now()
	done := make(chan struct{})
	var mon sync.WaitGroup
	peak := make([]int64, len(watch))
	mon.Go(func() {
		for {
			for i, p := range watch {
				peak[i] = max(peak[i], rssOf(p))
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	var worst time.Duration
	var probeErrs []string
	probe := &http.Client{Timeout: 5 * time.Second}
	mon.Go(func() {
		for {
			for _, u := range probes {
				t0 := time.Now()
				resp, err := probe.Get(u + "/health")
				took := time.Since(t0)
				worst = max(worst, took)
				switch {
				case err != nil:
					probeErrs = append(probeErrs, err.Error())
				case resp.StatusCode != http.StatusOK:
					probeErrs = append(probeErrs, fmt.Sprintf("%s: %d", u, resp.StatusCode))
				}
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: row.n}}
	var mu sync.Mutex
	statuses := map[int]int{}
	var sendErrs []string
	var slowest time.Duration
	var wg sync.WaitGroup
	for range row.n {
		wg.Go(func() {
			t0 := time.Now()
			resp, err := client.Post(base+row.path, "application/json", bytes.NewReader(row.body))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				sendErrs = append(sendErrs, err.Error())
				return
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			slowest = max(slowest, time.Since(t0))
			if statuses[resp.StatusCode]++; statuses[resp.StatusCode] == 1 {
				t.Logf("a %d: %.200s", resp.StatusCode, msg)
			}
		})
	}
	wg.Wait()
	close(done)
	mon.Wait()
	var after []string
	for i, p := range watch {
		after = append(after, fmt.Sprintf("%s peak %d MB, after %d MB", p.name, peak[i]>>20, rssOf(p)>>20))
	}
	t.Logf("%d requests in %v (slowest %v): by status %v; %s; slowest /health %v", row.n, time.Since(start).Round(time.Millisecond),
		slowest.Round(time.Millisecond), statuses, strings.Join(after, ", "), worst.Round(time.Millisecond))
	for _, e := range sendErrs {
		t.Errorf("a request failed: %s", e)
	}
	for s, n := range statuses {
		if s != http.StatusOK && (s < 400 || s >= 500) {
			t.Errorf("%d requests got %d, want a 4xx or 200", n, s)
		}
	}
	for i, p := range watch {
		if p.exited() {
			t.Fatalf("%s died", p.name)
		}
		if peak[i] > hostileBurstRSS {
			t.Errorf("%s reached %d MB, over the %d MB bound", p.name, peak[i]>>20, hostileBurstRSS>>20)
		}
	}
	if worst > hostileProbe || len(probeErrs) > 0 {
		t.Errorf("/health took up to %v (bound %v) during the burst; failures: %v", worst, hostileProbe, probeErrs)
	}
}

// oversized sends a body of size bytes, declared with its Content-Length, over a raw
// connection at about 3 MB/s (so that most of it is still on its way when the server answers),
// reading the answer meanwhile. It returns the answer's status, or the error that kept the
// client from reading it (ECONNRESET before the fix), and any error sending the body.
func oversized(t *testing.T, base, path string, size int) (status int, readErr, sendErr error) {
	u, _ := url.Parse(base)
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, u.Host, size)
	sent := make(chan error, 1)
	go func() {
		chunk := []byte(`{"prompt":"` + strings.Repeat("a", 64<<10-11))
		for left := size; left > 0; left -= len(chunk) {
			if _, err := c.Write(chunk[:min(left, len(chunk))]); err != nil {
				sent <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		sent <- nil
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err, <-sent
	}
	_, err = io.ReadAll(resp.Body)
	return resp.StatusCode, err, <-sent
}

// refusals checks what a client reads of two refusals at base: a body over the 4 MiB
// --max-body is a 413 the client reads whole (the server drains the rest before closing), and
// a 5,000-byte bad priority comes back cut in the 400's message. (Not an unknown model: a
// server of one model answers any model name, as llama-server does.)
func refusals(t *testing.T, base string) {
	t.Run("a body over --max-body is read as a 413", func(t *testing.T) {
		status, readErr, sendErr := oversized(t, base, "/v1/completions", 6<<20)
		if status != http.StatusRequestEntityTooLarge || readErr != nil || sendErr != nil {
			t.Fatalf("status %d, reading: %v, sending: %v; want a 413 read whole", status, readErr, sendErr)
		}
	})
	t.Run("a 5000-byte priority is cut", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"priority": strings.Repeat("m", 5000), "prompt": "x", "max_tokens": 1})
		resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || len(msg) > 1000 || !bytes.Contains(msg, []byte("(5000 bytes)")) {
			t.Fatalf("status %d, %d bytes: %.300s; want a 400 whose message quotes the priority cut", resp.StatusCode, len(msg), msg)
		}
	})
}

// TestHostileParseViaRouter sends the parse bursts and refusals through `ubatch route` to two
// nodes. The router tokenizes prompts itself (router/prompt.go) and bounds that on the router
// side: until that work is merged these rows may fail on the router, not on the nodes.
func TestHostileParseViaRouter(t *testing.T) {
	statSources("..")
	start := time.Now()
	f := startHostileFleet(t)
	watch := []*proc{f.router}
	probes := []string{f.rURL}
	for _, n := range f.nodes {
		watch, probes = append(watch, n.p), append(probes, n.url)
	}
	t.Run("via-router", func(t *testing.T) {
		for _, row := range parseBurstRows() {
			t.Run(row.name, func(t *testing.T) { burst(t, f.rURL, row, watch, probes) })
		}
		refusals(t, f.rURL)
	})
	waitHTTP(t, f.router, f.rURL+"/health", `"nodes_healthy":2`, 5*time.Second)
	t.Logf("whole test: %v", time.Since(start).Round(time.Millisecond))
}
