package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"ubatch/fleet"
	"ubatch/internal/testdata"
	"ubatch/internal/testkit"
	"ubatch/internal/testredis"
	"ubatch/prefixhash"
)

// servedNode is a `ubatch serve` running in-process (the real cmdServe, flags and all).
type servedNode struct {
	url    string
	stderr *testkit.SyncBuffer
}

// startServe runs cmdServe with args on a free port until the test ends and returns its URL.
func startServe(t *testing.T, args ...string) *servedNode {
	t.Helper()
	n := &servedNode{stderr: &testkit.SyncBuffer{}}
	n.start(t, args...)
	return n
}

// start runs cmdServe with args on a free port, logging to n.stderr, until the test ends, and
// sets n.url once it listens. The test fails when serve returns an error, then or at the end.
func (n *servedNode) start(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmdServe(ctx, append([]string{"--port", "0"}, args...), n.stderr, n.stderr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		if t.Failed() {
			t.Logf("--- serve %v log:\n%s", args, n.stderr.String())
		}
	})
	for deadline := time.Now().Add(60 * time.Second); n.url == ""; time.Sleep(20 * time.Millisecond) {
		if m := listeningLine.FindStringSubmatch(n.stderr.String()); m != nil {
			n.url = m[1]
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("serve returned %v:\n%s", err, n.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listening line:\n%s", n.stderr.String())
		}
	}
}

type completionResult struct {
	text   string
	cached int
}

// do sends a request to node n with the API key (a nil body for a GET) and returns the
// response's status and body.
func (n *servedNode) do(t *testing.T, key, path string, body []byte) (string, []byte) {
	t.Helper()
	method := http.MethodGet
	if body != nil {
		method = http.MethodPost
	}
	req, _ := http.NewRequest(method, n.url+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Status, b
}

// complete asks node n for a greedy completion of the token ids prompt.
func (n *servedNode) complete(t *testing.T, key string, prompt []int32) completionResult {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 24, "temperature": 0})
	status, b := n.do(t, key, "/v1/completions", body)
	if status != "200 OK" {
		t.Fatalf("completion: %s: %s", status, b)
	}
	var r struct {
		Choices []struct{ Text string }
		Usage   struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		}
	}
	if err := json.Unmarshal(b, &r); err != nil || len(r.Choices) != 1 || r.Usage.PromptTokens != len(prompt) {
		t.Fatalf("completion answer %s (%v)", b, err)
	}
	return completionResult{text: r.Choices[0].Text, cached: r.Usage.PromptTokensDetails.CachedTokens}
}

// metric reads a counter's value from node n's /metrics (0 when absent).
func (n *servedNode) metric(t *testing.T, key, name string) float64 {
	t.Helper()
	_, b := n.do(t, key, "/metrics", nil)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// storyPrompt is n token ids of the stories260K vocabulary after BOS.
func storyPrompt(n int, seed int32) []int32 {
	p := []int32{1}
	for i := int32(0); len(p) < n; i++ {
		p = append(p, 3+(seed+i*37)%500)
	}
	return p
}

// TestServeFetchesPrefixFromPeer: two nodes of one fleet (real redis-server, the same model);
// a 900-token prompt computed on node A is served by node B from A's KV blocks: the same greedy
// text, and B counts the fetched blocks as cached prompt tokens.
func TestServeFetchesPrefixFromPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two servers")
	}
	model := testdata.Model(t, "stories260K.gguf")
	rs := testredis.Start(t)
	defer slog.SetDefault(slog.Default())
	const key = "fleet-key"
	common := []string{"-m", model, "-c", "2048", "-np", "2", "--redis", rs.URL, "--api-key", key, "--fleet-ttl", "3s"}
	a := startServe(t, append(common, "--node-id", "a")...)
	ix := fleet.NewIndex(rs.Client(), fleet.DefaultNamespace)
	testkit.Eventually(t, 10*time.Second, "node a in Redis", func() bool { n, _, _ := ix.Nodes(context.Background()); return len(n) == 1 })
	b := startServe(t, append(common, "--node-id", "b")...)

	prompt := storyPrompt(900, 11)
	onA := a.complete(t, key, prompt)
	if onA.cached != 0 {
		t.Fatalf("node a: %d cached tokens on a cold cache", onA.cached)
	}
	full := (len(prompt) - 1) / 16 // the blocks a node may attach: the last prompt token is computed
	chain := prefixhash.Chain(nil, prompt, 16)
	testkit.Eventually(t, 10*time.Second, "node a's blocks in Redis", func() bool {
		m, err := ix.Match(context.Background(), []string{"a"}, chain)
		return err == nil && m[0] >= full
	})

	onB := b.complete(t, key, prompt)
	if onB.text != onA.text {
		t.Fatalf("node b from its peer: %q, node a computing: %q", onB.text, onA.text)
	}
	if onB.cached != full*16 {
		t.Fatalf("node b: %d cached tokens, want the %d of the %d blocks fetched", onB.cached, full*16, full)
	}
	if v := b.metric(t, key, "ubatch_peer_fetched_blocks_total"); v != float64(full) {
		t.Fatalf("node b fetched %v blocks, want %d", v, full)
	}
	if v := a.metric(t, key, "ubatch_peer_served_blocks_total"); v != float64(full) {
		t.Fatalf("node a served %v blocks, want %d", v, full)
	}
	if v := b.metric(t, key, "ubatch_peer_fetches_total"); v != 1 {
		t.Fatalf("node b made %v fetches, want 1", v)
	}
	// The engine's series carry the model's name (a server may serve several).
	if v := b.metric(t, key, `ubatch_kv_tier_hit_blocks_total{model="stories260K.gguf",tier="peer"}`); v != float64(full) {
		t.Fatalf("node b's engine imported %v blocks from the peer tier, want %d", v, full)
	}

	// A prompt neither node holds: computed, no fetch, no failure.
	other := storyPrompt(300, 5)
	if r := b.complete(t, key, other); r.cached >= 16 { // BOS, as every prompt's, may be copied
		t.Fatalf("a new prompt on node b: %d cached tokens", r.cached)
	}
	if v := b.metric(t, key, "ubatch_peer_fetches_total"); v != 1 {
		t.Fatalf("node b made %v fetches after an unknown prompt, want still 1", v)
	}
	for _, reason := range []string{"down", "timeout", "status", "identity", "corrupt", "tokens"} {
		if v := b.metric(t, key, fmt.Sprintf(`ubatch_peer_fetch_failures_total{reason=%q}`, reason)); v != 0 {
			t.Fatalf("node b: %v failures (%s)", v, reason)
		}
	}
	// The endpoint is behind the API key.
	resp, err := http.Post(a.url+"/kv/blocks", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /kv/blocks without the key: %s", resp.Status)
	}
}

func TestAdvertiseURL(t *testing.T) {
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	tests := []struct {
		name, flag string
		addr       net.Addr
		want       string // "" = an error mentioning --advertise-url
	}{
		{"from the listener", "", tcp("127.0.0.1:8080"), "http://127.0.0.1:8080"},
		{"every interface", "", tcp("0.0.0.0:8080"), ""},
		{"every interface, IPv6", "", tcp("[::]:8080"), ""},
		{"given", "http://node1:8080/", tcp("0.0.0.0:8080"), "http://node1:8080"},
		{"https with a path", "https://node1.example/ubatch", tcp("0.0.0.0:443"), "https://node1.example/ubatch"},
		{"advertised 0.0.0.0", "http://0.0.0.0:8080", tcp("0.0.0.0:8080"), ""},
		{"advertised ::", "http://[::]:8080", tcp("0.0.0.0:8080"), ""},
		{"no scheme", "node1:8080", tcp("0.0.0.0:8080"), ""},
		{"a query", "http://node1:8080/?x=1", tcp("0.0.0.0:8080"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := advertiseURL(tc.flag, tc.addr)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "--advertise-url") {
					t.Fatalf("advertiseURL = %q, %v; want an error naming --advertise-url", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("advertiseURL = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestFleetFlagsCheck(t *testing.T) {
	tests := []struct {
		name                      string
		redis, node, advert, host string
		ok                        bool
	}{
		{"no fleet", "", "", "", "0.0.0.0", true},
		{"node id without redis", "", "n1", "", "127.0.0.1", false},
		{"advertise without redis", "", "", "http://n1:8080", "127.0.0.1", false},
		{"loopback", "redis://r", "", "", "127.0.0.1", true},
		{"every interface", "redis://r", "", "", "0.0.0.0", false},
		{"every interface, IPv6", "redis://r", "", "", "::", false},
		{"every interface, advertised", "redis://r", "", "http://n1:8080", "0.0.0.0", true},
		{"advertised 0.0.0.0", "redis://r", "", "http://0.0.0.0:8080", "0.0.0.0", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := fleetFlags{redis: tc.redis, nodeID: tc.node, advertise: tc.advert}
			if err := f.check(tc.host); (err == nil) != tc.ok {
				t.Fatalf("check: %v, want ok %v", err, tc.ok)
			}
		})
	}
}
