package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"ubatch/internal/testdata"
)

// The slot hog (issue 32): one request asks for every slot, {"n":64, "max_tokens":1000000,
// "ignore_eos":true}, and would hold them and the KV cache for most of a minute; another
// client's first token must come within a second all the same. Sent to a node (stories260K, one
// thread, the default 64 slots) directly from another address, and through a trusted proxy
// whose X-Forwarded-For tells the two clients apart.

const hogTTFT = time.Second

func TestHostileSlotHog(t *testing.T) {
	statSources("..")
	model := testdata.Model(t, "stories260K.gguf")
	n := startNode(t, "hog", model, "-t", "1", "--trusted-proxies", "127.0.0.1/32")
	waitHTTP(t, n.p, n.url+"/health", "ok", 20*time.Second)

	t.Run("n over --max-n", func(t *testing.T) {
		resp, err := http.Post(n.url+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"Once","n":65,"max_tokens":4}`))
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct {
				Param *string `json:"param"`
			} `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != "n" {
			t.Fatalf("n 65: status %d, param %v; want 400 naming n", resp.StatusCode, e.Error.Param)
		}
	})
	tests := []struct {
		name             string
		hogFrom, plainOf string // local address; and the X-Forwarded-For client when from the proxy
		hogXFF, plainXFF string
	}{
		{name: "direct, from two addresses", hogFrom: "127.0.0.3", plainOf: "127.0.0.2"},
		{name: "through a trusted proxy", hogFrom: "127.0.0.1", plainOf: "127.0.0.1", hogXFF: "203.0.113.7", plainXFF: "198.51.100.9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, stopHog := context.WithCancel(context.Background())
			hogDone := make(chan int, 1)
			go func() {
				hogDone <- post(ctx, fromAddr(tc.hogFrom), n.url+"/v1/completions", tc.hogXFF,
					`{"prompt":"Once","n":64,"max_tokens":1000000,"ignore_eos":true}`)
			}()
			running := waitRunning(t, n.url, 16, 20*time.Second)
			ttft, tokens := firstToken(t, fromAddr(tc.plainOf), n.url, tc.plainXFF)
			t.Logf("hog on %d slots: the plain client's first token after %v (%d tokens)", running, ttft.Round(time.Millisecond), tokens)
			if ttft > hogTTFT {
				t.Errorf("the plain client's first token after %v beside the slot hog, want within %v", ttft, hogTTFT)
			}
			if tokens == 0 {
				t.Error("the plain client got no token")
			}
			stopHog()
			<-hogDone
			waitRunning(t, n.url, -1, 20*time.Second) // the hog's sequences dropped
			if n.p.exited() {
				t.Fatal("the node died")
			}
		})
	}
}

// fromAddr is a client whose connections come from the loopback address ip.
func fromAddr(ip string) *http.Client {
	return &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}}
}

// post sends body with X-Forwarded-For xff (when set) and returns the status, 0 on an error
// (a cancelled ctx).
func post(ctx context.Context, c *http.Client, url, xff, body string) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

var runningRe = regexp.MustCompile(`(?m)^ubatch_sequences_running(?:\{[^}]*\})? ([0-9.e+]+)$`)

// waitRunning polls base's /metrics until at least min sequences run (min < 0: none) and
// returns how many do.
func waitRunning(t *testing.T, base string, min int, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		n := -1
		if resp, err := http.Get(base + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if m := runningRe.FindSubmatch(b); m != nil {
				f, _ := strconv.ParseFloat(string(m[1]), 64)
				n = int(f)
			}
		}
		if (min < 0 && n == 0) || (min >= 0 && n >= min) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sequences running after %v, want %d", n, d, min)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// firstToken streams an 8-token completion from c and returns the time to its first token
// and the tokens it got.
func firstToken(t *testing.T, c *http.Client, base, xff string) (time.Duration, int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", strings.NewReader(completion("Once upon a time", 8, true)))
	req.Header.Set("Content-Type", "application/json")
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("the plain client's request: %d %s", resp.StatusCode, b)
	}
	var ttft time.Duration
	tokens := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(line), &ch) != nil || len(ch.Choices) == 0 || ch.Choices[0].Text == "" {
			continue
		}
		if tokens == 0 {
			ttft = time.Since(t0)
		}
		tokens++
	}
	return ttft, tokens
}
