package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"ubatch/grammar"
	"ubatch/server"
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

// TestConstraintFlags: serve's constraint limits default to the grammar's and the server's
// defaults, reach server.RequestLimits as given, and must be positive.
func TestConstraintFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // substring of the error, "" for none
	}{
		{name: "defaults"},
		{name: "set", args: []string{"--grammar-max-repetition", "50", "--max-tools", "4", "--grammar-max-time", "500ms"}},
		{name: "zero repetition", args: []string{"--grammar-max-repetition", "0"}, want: "--grammar-max-repetition"},
		{name: "negative budget", args: []string{"--grammar-budget", "-1"}, want: "--grammar-budget"},
		{name: "no tools", args: []string{"--max-tools", "0"}, want: "--max-tools must"},
		{name: "zero time", args: []string{"--grammar-max-time", "0s"}, want: "--grammar-max-time"},
		{name: "parse bounds set", args: []string{"--max-messages", "10", "--max-content-parts", "2", "--parse-budget", "1048576", "--parse-wait", "1s"}},
		{name: "no messages", args: []string{"--max-messages", "0"}, want: "--max-messages must"},
		{name: "no parts", args: []string{"--max-content-parts", "-3"}, want: "--max-content-parts must"},
		{name: "no parse budget", args: []string{"--parse-budget", "0"}, want: "--parse-budget must"},
		{name: "no parse wait", args: []string{"--parse-wait", "0s"}, want: "--parse-wait must"},
		{name: "no render time", args: []string{"--render-timeout", "0s"}, want: "--render-timeout must"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			var cf constraintFlags
			cf.register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := cf.check()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
			if tc.name == "defaults" && (cf.lim.Grammar.MaxRepetition != grammar.DefaultMaxRepetition ||
				cf.lim.MaxTools != server.DefaultMaxTools || cf.lim.GrammarBudget != grammar.DefaultBudget) {
				t.Fatalf("defaults %+v", cf.lim)
			}
			if tc.name == "defaults" && (cf.lim.MaxMessages != server.DefaultMaxMessages || cf.parseBudget != server.DefaultParseBudget) {
				t.Fatalf("defaults %+v, parse budget %d", cf.lim, cf.parseBudget)
			}
			if tc.name == "parse bounds set" && (cf.lim.MaxMessages != 10 || cf.lim.MaxContentParts != 2 || cf.parseBudget != 1<<20 || cf.parseWait != time.Second) {
				t.Fatalf("flags did not reach the limits: %+v, parse budget %d wait %v", cf.lim, cf.parseBudget, cf.parseWait)
			}
			if tc.name == "set" && (cf.lim.Grammar.MaxRepetition != 50 || cf.lim.MaxTools != 4 ||
				cf.lim.Grammar.MaxTime != 500*time.Millisecond) {
				t.Fatalf("flags did not reach the limits: %+v", cf.lim)
			}
		})
	}
}
