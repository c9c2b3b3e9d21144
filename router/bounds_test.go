package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"ubatch/internal/testkit"
)

// testLimits are the default parse bounds.
var testLimits = limits{prefixBytes: DefaultPrefixBytes, maxMessages: maxParsedMessages, maxParts: maxParsedParts}

// chatBody is a chat request of n messages of about 35 bytes each.
func chatBody(n int) string {
	var b strings.Builder
	b.WriteString(`{"messages": [`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role": "user", "content": "hello %d"}`, i)
	}
	b.WriteString(`], "max_tokens": 1}`)
	return b.String()
}

// TestPrefixIsThePromptsLeadingTokens checks that the bounded prefix the router tokenizes is
// the start of the whole prompt's tokens, so that its block hashes are the whole prompt's.
func TestPrefixIsThePromptsLeadingTokens(t *testing.T) {
	p := prompter(t)
	long := strings.Repeat(story+" ", 40) // about 8 KB
	tests := []struct {
		name, path, body string
		prefix           int
		wantWhole        bool
	}{
		{"short text whole", "/v1/completions", fmt.Sprintf(`{"prompt": %q}`, story), 1024, true},
		{"long text cut", "/v1/completions", fmt.Sprintf(`{"prompt": %q}`, long), 1024, false},
		{"tokens cut", "/v1/completions", `{"prompt": [` + strings.TrimSuffix(strings.Repeat("7,", 600), ",") + `]}`, 1024, false},
		{"short chat whole", "/v1/chat/completions", chatBody(5), 1024, true},
		{"many messages cut", "/v1/chat/completions", chatBody(2000), 1024, false},
		{"one long message cut", "/v1/chat/completions", fmt.Sprintf(`{"messages": [{"role": "user", "content": %q}]}`, long), 1024, false},
		{"long text part cut", "/v1/chat/completions",
			fmt.Sprintf(`{"messages": [{"role": "user", "content": [{"type": "text", "text": %q}]}]}`, long), 1024, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lim := testLimits
			lim.prefixBytes = tc.prefix
			got := p.parse(tc.path, []byte(tc.body), lim)
			lim.prefixBytes, lim.maxMessages = 1<<30, 1<<30
			full := p.parse(tc.path, []byte(tc.body), lim)
			if !full.whole || len(full.tokens) == 0 {
				t.Fatalf("unbounded parse: whole %v, %d tokens", full.whole, len(full.tokens))
			}
			if got.whole != tc.wantWhole {
				t.Fatalf("whole = %v, want %v", got.whole, tc.wantWhole)
			}
			if len(got.tokens) == 0 || !slices.Equal(got.tokens, full.tokens[:min(len(got.tokens), len(full.tokens))]) {
				t.Fatalf("the %d prefix tokens are not the start of the %d tokens of the whole prompt", len(got.tokens), len(full.tokens))
			}
			if !tc.wantWhole && len(got.tokens) >= len(full.tokens) {
				t.Fatalf("a cut prompt gave %d tokens, the whole one %d", len(got.tokens), len(full.tokens))
			}
		})
	}
}

// TestHugeChatParsesABoundedPrefix parses the chat of 100,000 short messages (3.5 MB)
// and bounds what that allocates: the router decodes and renders only its leading messages.
func TestHugeChatParsesABoundedPrefix(t *testing.T) {
	p := prompter(t)
	body := []byte(chatBody(100_000))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := p.parse("/v1/chat/completions", body, testLimits)
	runtime.ReadMemStats(&after)
	if got.whole || len(got.tokens) == 0 {
		t.Fatalf("whole %v, %d tokens: want a prefix", got.whole, len(got.tokens))
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("parsing a %d-byte chat of 100,000 messages allocated %d bytes, %d tokens", len(body), alloc, len(got.tokens))
	if limit := uint64(3 * len(body)); alloc > limit {
		t.Fatalf("parsing allocated %d bytes, over %d", alloc, limit)
	}
}

func TestChatPrefixBounds(t *testing.T) {
	lim := limits{prefixBytes: 1 << 20, maxMessages: 3, maxParts: 2}
	tests := []struct {
		name      string
		raw       string
		wantN     int
		wantAll   bool
		wantOK    bool
		wantParts int // parts of the first message's content; -1 = not an array
	}{
		{"not an array", `{"role": "user"}`, 0, false, false, -1},
		{"a message not an object", `[1]`, 0, false, false, -1},
		{"empty", `[]`, 0, true, true, -1},
		{"under the count cap", `[{"content": "a"}, {"content": "b"}]`, 2, true, true, -1},
		{"over the count cap", `[{"content": "a"}, {"content": "b"}, {"content": "c"}, {"content": "d"}]`, 3, false, true, -1},
		{"parts cut", `[{"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}, {"type": "text", "text": "c"}]}]`, 1, false, true, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msgs, all, ok := chatPrefix([]byte(tc.raw), lim)
			if len(msgs) != tc.wantN || all != tc.wantAll || ok != tc.wantOK {
				t.Fatalf("%d messages, all %v, ok %v; want %d, %v, %v", len(msgs), all, ok, tc.wantN, tc.wantAll, tc.wantOK)
			}
			if tc.wantParts >= 0 {
				if parts, _ := msgs[0]["content"].([]any); len(parts) != tc.wantParts {
					t.Fatalf("%d parts, want %d", len(parts), tc.wantParts)
				}
			}
		})
	}
}

// TestOverTheParseBudgetRoutesByLoad fills the parse budget: a request then is forwarded
// unparsed, not refused.
func TestOverTheParseBudgetRoutesByLoad(t *testing.T) {
	a := startFake(t, answer(http.StatusOK))
	rt := startRouter(t, Config{Nodes: []string{a.ts.URL}, ParseBudget: 1 << 20})
	body := fmt.Sprintf(`{"prompt": %q}`, story)
	if status, _, b := rt.post("/v1/completions", body); status != http.StatusOK {
		t.Fatalf("status %d: %s", status, b)
	}
	if got := rt.counter("parses", "whole"); got != 1 {
		t.Fatalf("%v whole parses, want 1", got)
	}
	if !rt.r.budget.tryAcquire(1 << 20) { // what parsing requests hold
		t.Fatal("an idle budget is not free")
	}
	defer rt.r.budget.release(1 << 20)
	if status, _, b := rt.post("/v1/completions", body); status != http.StatusOK {
		t.Fatalf("over the budget: status %d: %s", status, b)
	}
	if got := rt.counter("parses", "over_budget"); got != 1 {
		t.Fatalf("%v parses over the budget, want 1", got)
	}
	if a.calls.Load() != 2 {
		t.Fatalf("the node got %d requests, want 2", a.calls.Load())
	}
}

func TestByteBudget(t *testing.T) {
	b := &byteBudget{max: 10}
	steps := []struct {
		name    string
		acquire int64 // negative: release
		want    bool
	}{
		{"fits", 6, true},
		{"over", 5, false},
		{"up to the max", 4, true},
		{"full", 1, false},
		{"release", -6, true},
		{"fits again", 6, true},
	}
	for _, s := range steps {
		if s.acquire < 0 {
			b.release(-s.acquire)
			continue
		}
		if got := b.tryAcquire(s.acquire); got != s.want {
			t.Fatalf("%s: tryAcquire(%d) = %v, want %v (used %d)", s.name, s.acquire, got, s.want, b.used.Load())
		}
	}
}

// TestPromptOverTheNodesContext sends a completion prompt longer than the nodes' context could
// hold: the router refuses it (400, param prompt) from the context it read from the nodes'
// /props, before tokenizing it; a prompt within the bound is forwarded.
func TestPromptOverTheNodesContext(t *testing.T) {
	n := startNode(t, "", "")
	rt := startRouter(t, Config{Nodes: []string{n.url}})
	testkit.Eventually(t, 10*time.Second, "the node's context known", func() bool { return rt.r.nodeContext() > 0 })
	nctx, piece := rt.r.nodeContext(), rt.r.cfg.Prompter.maxPiece
	tests := []struct {
		name    string
		bytes   int
		refused bool
	}{
		{"over the bound", nctx*piece + 10, true},
		{"within the bound", nctx, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := rt.counter("rejected", "context_length")
			status, _, body := rt.post("/v1/completions", fmt.Sprintf(`{"prompt": %q, "max_tokens": 1}`, strings.Repeat("a", tc.bytes)))
			refused := rt.counter("rejected", "context_length") > before
			if refused != tc.refused || status != http.StatusBadRequest && tc.refused {
				t.Fatalf("refused by the router: %v, want %v; status %d: %.300s", refused, tc.refused, status, body)
			}
			if tc.refused && errorParam(body) != "prompt" {
				t.Fatalf("param %q, want prompt: %s", errorParam(body), body)
			}
		})
	}
}

// errorParam is the param of an OpenAI error body, "" if there is none.
func errorParam(body []byte) string {
	var e struct {
		Error struct {
			Param string `json:"param"`
		} `json:"error"`
	}
	json.Unmarshal(body, &e)
	return e.Error.Param
}

// TestEchoedStringsAreCut asks for a route with a 5,000-byte path: the 404 names a cut one.
func TestEchoedStringsAreCut(t *testing.T) {
	a := startFake(t, answer(http.StatusOK))
	rt := startRouter(t, Config{Nodes: []string{a.ts.URL}, HealthInterval: time.Hour})
	resp, err := http.Get(rt.ts.URL + "/" + strings.Repeat("x", 5000))
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusNotFound || len(body) > 600 || !strings.Contains(string(body), "xxx...") {
		t.Fatalf("status %d, %d bytes: %.300s", resp.StatusCode, len(body), body)
	}
}
