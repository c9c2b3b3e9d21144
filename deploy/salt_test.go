package deploy

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"ubatch/internal/testdata"
	"ubatch/router"
)

// TestSaltedTenantsThroughRouter: two tenants send one prompt through a real router to two
// real nodes, each with its cache_salt. A tenant's first request finds nothing cached, though
// the other tenant's blocks of the same tokens are on a node; its second goes to the node of
// its first (the router roots its routing hashes in the salt) and finds all of it there.
func TestSaltedTenantsThroughRouter(t *testing.T) {
	statSources("..")
	model := testdata.Model(t, "stories260K.gguf")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("%s not found; skipping the salted-tenants test", model)
	}
	_, _, url := startNodesAndRouter(t, model, []string{"s1", "s2"}, func(string) []string {
		return []string{"-np", "4", "-c", "1024", "-t", "1"}
	})
	client := &http.Client{Timeout: 30 * time.Second}
	prompt := strings.Repeat("Once upon a time there was a little girl who liked to play in the park. ", 3)
	send := func(t *testing.T, salt string) (node string, promptTokens, cached int) {
		t.Helper()
		m := map[string]any{"prompt": prompt, "max_tokens": 1, "temperature": 0}
		if salt != "" {
			m["cache_salt"] = salt
		}
		body, _ := json.Marshal(m)
		resp, err := client.Post(url+"/v1/completions", "application/json", strings.NewReader(string(body)))
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
	homes := map[string]string{}
	tests := []struct {
		name  string
		salt  string
		again bool // the tenant's second request: its node's cache holds the prompt
	}{
		{name: "tenant a", salt: "a"},
		{name: "tenant b", salt: "b"},
		{name: "no salt", salt: ""},
		{name: "tenant a again", salt: "a", again: true},
		{name: "tenant b again", salt: "b", again: true},
		{name: "no salt again", salt: "", again: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node, n, cached := send(t, tc.salt)
			t.Logf("salt %q: node %s, %d of %d prompt tokens cached", tc.salt, node, cached, n)
			if !tc.again {
				homes[tc.salt] = node
				if cached != 0 {
					t.Fatalf("%d of %d prompt tokens cached on a tenant's first request", cached, n)
				}
				return
			}
			if node != homes[tc.salt] || cached != n-1 {
				t.Fatalf("node %s with %d of %d cached, want the first request's node %s with %d", node, cached, n, homes[tc.salt], n-1)
			}
		})
	}
}
