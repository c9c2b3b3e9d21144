package router

import (
	"context"
	"encoding/json"
	"testing"

	"ubatch/prefixhash"
)

// TestSaltedPromptsRouteTogether: a request's cache_salt (read from its body) roots its routing
// hashes, so requests of one salt follow each other to the node that has their prefix, while
// the same prompt under another salt or none gets no prefix credit there (that node holds none
// of its blocks) and goes by load.
func TestSaltedPromptsRouteTogether(t *testing.T) {
	r, err := New(Config{Prompter: &Prompter{}, Nodes: []string{"http://a:1", "http://b:1", "http://c:1"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range r.nodes {
		n.healthy = true
	}
	prompt := make([]int32, 20*16)
	for i := range prompt {
		prompt[i] = int32(i)
	}
	body := func(salt string) []byte {
		m := map[string]any{"prompt": prompt}
		if salt != "" {
			m["cache_salt"] = salt
		}
		b, _ := json.Marshal(m)
		return b
	}
	route := func(salt string) decision {
		p := r.cfg.Prompter.parse("/v1/completions", body(salt), testLimits)
		if p.root != prefixhash.Salted(salt) || len(p.tokens) != len(prompt) {
			t.Fatalf("parsed root %#x and %d tokens, want the salt's %#x and %d", p.root, len(p.tokens), prefixhash.Salted(salt), len(prompt))
		}
		return r.decideFrom(context.Background(), p.tokens, p.root, 10)
	}
	first := route("tenant-1")
	home := first.order[0].n
	tests := []struct {
		name   string
		salt   string
		home   bool // routed to the first request's node for its prefix
		reason string
	}{
		{name: "same salt", salt: "tenant-1", home: true, reason: ReasonPrefix},
		{name: "another salt", salt: "tenant-2", reason: ReasonLeastLoaded},
		{name: "no salt", reason: ReasonLeastLoaded},
		{name: "same salt again", salt: "tenant-1", home: true, reason: ReasonPrefix},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := route(tc.salt)
			if (d.order[0].n == home) != tc.home || d.reason != tc.reason {
				t.Fatalf("routed to %s (%s), home %s; want home %v (%s); scores %v", d.order[0].n.label, d.reason, home.label, tc.home, tc.reason, scores(d))
			}
			r.release(d.order[0].n)
		})
	}
}
