package main

import (
	"strings"
	"testing"
)

// TestClientLimitFlags: serve's per-client, live-view and embedding limits must be positive, and
// --trusted-proxies must parse, each refusal naming its flag.
func TestClientLimitFlags(t *testing.T) {
	for _, tc := range []struct {
		name                                  string
		perClient, live, embInputs, embTokens int
		trusted, want                         string // want: substring of the error, "" for none
		proxies                               int
	}{
		{"defaults", 64, 16, 256, 32768, "", "", 0},
		{"proxies", 64, 16, 256, 32768, "10.0.0.0/8, 192.168.1.7", "", 2},
		{"no per-client cap", 0, 16, 256, 32768, "", "--max-conns-per-client 0", 0},
		{"no live stream", 64, 0, 256, 32768, "", "--max-live-streams 0", 0},
		{"no embedding input", 64, 16, 0, 32768, "", "--max-embedding-inputs 0", 0},
		{"negative embedding tokens", 64, 16, 256, -1, "", "--max-embedding-tokens -1", 0},
		{"a proxy by name", 64, 16, 256, 32768, "nginx.local", "--trusted-proxies", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := checkClientLimitFlags(tc.perClient, tc.live, tc.embInputs, tc.embTokens, tc.trusted)
			switch {
			case tc.want == "" && (err != nil || len(p) != tc.proxies):
				t.Fatalf("%d proxies, %v; want %d", len(p), err, tc.proxies)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}
