package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"ubatch/internal/testdata"
	"ubatch/router"
)

// TestSaltedTenantsThroughRouter: tenants send one prompt through a real router to two real
// nodes, told apart by their cache_salt, or (nodes and router with --cache-salt-per-key) by
// their API keys. A tenant's first request finds nothing cached, though another tenant's blocks
// of the same tokens are on a node, and the router does not route it for a prefix (it roots its
// routing hashes as the nodes do); its second goes to the node of its first for its prefix and
// finds all of it there.
func TestSaltedTenantsThroughRouter(t *testing.T) {
	statSources("..")
	model := testdata.Model(t, "stories260K.gguf")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("%s not found; skipping the salted-tenants test", model)
	}
	type tenant struct{ salt, key string }
	a, b, none := tenant{salt: "a"}, tenant{salt: "b"}, tenant{}
	ka, kb := tenant{key: "key-a"}, tenant{key: "key-b"}
	setups := []struct {
		name    string
		perKey  bool
		tenants []tenant
	}{
		{name: "cache_salt", tenants: []tenant{a, b, none}},
		{name: "per key", perKey: true, tenants: []tenant{ka, kb, none, {key: "key-a", salt: "b"}}},
	}
	for _, su := range setups {
		t.Run(su.name, func(t *testing.T) {
			var extra []string
			if su.perKey {
				extra = []string{"--cache-salt-per-key"}
			}
			_, _, url := startNodesAndRouter(t, model, []string{"s1", "s2"}, func(string) []string {
				return append([]string{"-np", "4", "-c", "1024", "-t", "1"}, extra...)
			}, extra...)
			homes := map[tenant]string{}
			for _, again := range []bool{false, true} {
				for _, tn := range su.tenants {
					name := fmt.Sprintf("salt %q key %q again %v", tn.salt, tn.key, again)
					t.Run(name, func(t *testing.T) {
						before := routeDecisions(t, url)
						node, n, cached := sendSalted(t, url, tn.salt, tn.key)
						reason := changedReason(before, routeDecisions(t, url))
						t.Logf("node %s (%s), %d of %d prompt tokens cached", node, reason, cached, n)
						if !again {
							homes[tn] = node
							if cached != 0 || reason == router.ReasonPrefix {
								t.Fatalf("%d of %d prompt tokens cached, routed for %q on a tenant's first request", cached, n, reason)
							}
							return
						}
						if node != homes[tn] || cached != n-1 || reason != router.ReasonPrefix {
							t.Fatalf("node %s (%s) with %d of %d cached, want the first request's node %s for its prefix with %d",
								node, reason, cached, n, homes[tn], n-1)
						}
					})
				}
			}
		})
	}
}

// saltedPrompt is the prompt every tenant of TestSaltedTenantsThroughRouter sends.
var saltedPrompt = strings.Repeat("Once upon a time there was a little girl who liked to play in the park. ", 3)

// sendSalted sends saltedPrompt to url's completions with cache_salt salt and API key key (each
// if not empty), and returns the node that served it and its usage.
func sendSalted(t *testing.T, url, salt, key string) (node string, promptTokens, cached int) {
	t.Helper()
	m := map[string]any{"prompt": saltedPrompt, "max_tokens": 1, "temperature": 0}
	if salt != "" {
		m["cache_salt"] = salt
	}
	body, _ := json.Marshal(m)
	req, _ := http.NewRequest("POST", url+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var r struct {
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(data, &r) != nil {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	return resp.Header.Get(router.NodeHeader), r.Usage.PromptTokens, r.Usage.PromptTokensDetails.CachedTokens
}

// routeDecisions reads ubatch_route_decisions_total from the router at url, summed by reason.
func routeDecisions(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "ubatch_route_decisions_total{") {
			continue
		}
		i := strings.Index(line, `reason="`)
		j := strings.LastIndexByte(line, ' ')
		if i < 0 || j < 0 {
			continue
		}
		reason := line[i+len(`reason="`):]
		reason = reason[:strings.IndexByte(reason, '"')]
		v, _ := strconv.ParseFloat(line[j+1:], 64)
		out[reason] += v
	}
	return out
}

// changedReason is the reason whose count grew from before to after ("" if none did).
func changedReason(before, after map[string]float64) string {
	for r, v := range after {
		if v > before[r] {
			return r
		}
	}
	return ""
}
