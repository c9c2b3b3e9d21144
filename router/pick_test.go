package router

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"ubatch/fleet"
	"ubatch/internal/sse"
	"ubatch/prefixhash"
)

// TestDecide scores three nodes from published load and recent affinity (no Redis).
func TestDecide(t *testing.T) {
	prompt := make([]int32, 20*16) // 20 blocks
	for i := range prompt {
		prompt[i] = int32(i)
	}
	chain := prefixhash.Chain(nil, prompt, 16)
	type nodeState struct {
		cachedBlocks int
		running      int
		waiting      int
		inflight     int
		bound        int // the node's live running bound (Load.Bound); 0 = not reported
		healthy      bool
	}
	tests := []struct {
		name   string
		nodes  [3]nodeState
		noText bool
		want   int // index of the chosen node
		reason string
	}{
		{"nothing cached: least loaded", [3]nodeState{{running: 3, healthy: true}, {running: 1, healthy: true}, {running: 2, healthy: true}}, false, 1, ReasonLeastLoaded},
		{"cache wins over small load", [3]nodeState{{cachedBlocks: 10, running: 4, healthy: true}, {running: 0, healthy: true}, {healthy: true}}, false, 0, ReasonPrefix},
		{"longest prefix wins", [3]nodeState{{cachedBlocks: 5, healthy: true}, {cachedBlocks: 12, healthy: true}, {cachedBlocks: 1, healthy: true}}, false, 1, ReasonPrefix},
		// 2 blocks = 32 tokens, less than 8 requests of load at weight 16.
		{"load outweighs a short prefix", [3]nodeState{{cachedBlocks: 2, running: 8, healthy: true}, {running: 0, healthy: true}, {running: 6, healthy: true}}, false, 1, ReasonLoad},
		{"requests queued beyond max_running weigh more", [3]nodeState{{cachedBlocks: 20, running: 16, waiting: 6, healthy: true}, {cachedBlocks: 10, running: 4, healthy: true}, {running: 9, healthy: true}}, false, 1, ReasonLoad},
		// a: 320 − 16×16 = 64; b: 0 − 16×4 = −64: the cache holds.
		{"a full node keeps its prefix while nothing queues", [3]nodeState{{cachedBlocks: 20, running: 16, healthy: true}, {running: 4, healthy: true}, {running: 5, healthy: true}}, false, 0, ReasonPrefix},
		// a: 320 − 16×20 − 256×4 < 0; b: −64: spill.
		{"a queue spills even a long prefix", [3]nodeState{{cachedBlocks: 20, running: 16, waiting: 4, healthy: true}, {running: 4, healthy: true}, {running: 5, healthy: true}}, false, 1, ReasonLoad},
		// a: 12 of load against its live bound of 8: 320 − 16×12 − 256×4 < 0; with only
		// max_running (16) known it would keep the request (128 against b's −64).
		{"a queue beyond the live bound spills", [3]nodeState{{cachedBlocks: 20, running: 8, waiting: 4, bound: 8, healthy: true}, {running: 4, healthy: true}, {running: 5, healthy: true}}, false, 1, ReasonLoad},
		{"the same node without a live bound keeps its prefix", [3]nodeState{{cachedBlocks: 20, running: 8, waiting: 4, healthy: true}, {running: 4, healthy: true}, {running: 5, healthy: true}}, false, 0, ReasonPrefix},
		{"router in-flight counts when higher than published", [3]nodeState{{inflight: 5, healthy: true}, {running: 2, healthy: true}, {running: 3, healthy: true}}, false, 1, ReasonLeastLoaded},
		{"unhealthy nodes are skipped", [3]nodeState{{cachedBlocks: 20}, {running: 5, healthy: true}, {running: 6, healthy: true}}, false, 1, ReasonLeastLoaded},
		{"no prompt", [3]nodeState{{running: 2, healthy: true}, {running: 2, healthy: true}, {running: 0, healthy: true}}, true, 2, ReasonNoPrompt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(Config{Prompter: &Prompter{}, Nodes: []string{"http://a:1", "http://b:1", "http://c:1"}, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.nodes {
				n := r.nodes[[]string{"http://a:1", "http://b:1", "http://c:1"}[i]]
				n.healthy = s.healthy
				n.status = fleet.Status{ID: n.label, BlockSize: 16, MaxRunning: 16, Load: fleet.Load{Running: s.running, Waiting: s.waiting, Bound: s.bound}}
				n.statusAt = time.Now()
				n.inflight.Store(int64(s.inflight))
				r.recent.add(n, chain[:s.cachedBlocks])
			}
			p := prompt
			if tc.noText {
				p = nil
			}
			d := r.decide(context.Background(), p, 10)
			if got := d.order[0].n.label; got != []string{"a:1", "b:1", "c:1"}[tc.want] || d.reason != tc.reason {
				t.Fatalf("chose %s (%s), want %s (%s); scores %v", got, d.reason, []string{"a:1", "b:1", "c:1"}[tc.want], tc.reason, scores(d))
			}
		})
	}
}

func scores(d decision) map[string]float64 {
	out := map[string]float64{}
	for _, c := range d.order {
		out[c.n.label] = c.score
	}
	return out
}

func TestTiesRotate(t *testing.T) {
	r, err := New(Config{Prompter: &Prompter{}, Nodes: []string{"http://a:1", "http://b:1", "http://c:1"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range r.nodes {
		n.healthy = true
	}
	seen := map[string]int{}
	for range 30 {
		n := r.decide(context.Background(), nil, 1).order[0].n
		seen[n.label]++
		r.release(n)
	}
	if len(seen) != 3 || seen["a:1"] != 10 {
		t.Fatalf("equal nodes chosen %v, want 10 each", seen)
	}
}

// TestBurstPicksOneNode sends a burst of requests with one long prompt to three idle nodes at
// once: every decision must see the claims made before it, so all go where the first went
// (which computes the prompt once) instead of each picking the node that looked least loaded.
func TestBurstPicksOneNode(t *testing.T) {
	r, err := New(Config{Prompter: &Prompter{}, Nodes: []string{"http://a:1", "http://b:1", "http://c:1"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range r.nodes {
		n.healthy = true
	}
	prompt := make([]int32, 40*16) // 640 tokens: worth more than the burst's load at weight 16
	for i := range prompt {
		prompt[i] = int32(i)
	}
	const burst = 12
	chosen := make(chan *node, burst)
	var wg sync.WaitGroup
	for range burst {
		wg.Go(func() { chosen <- r.decide(context.Background(), prompt, 10).order[0].n })
	}
	wg.Wait()
	close(chosen)
	seen := map[string]int{}
	for n := range chosen {
		seen[n.label]++
	}
	if len(seen) != 1 {
		t.Fatalf("a burst of one prompt went to %v, want a single node", seen)
	}
	for _, n := range r.nodes {
		if got, want := n.inflight.Load(), int64(seen[n.label]); got != want {
			t.Fatalf("%s: %d requests claimed in flight, want %d", n.label, got, want)
		}
	}
}

func TestAffinityExpires(t *testing.T) {
	a := newAffinity(50*time.Millisecond, 100)
	n := &node{label: "x"}
	a.add(n, []uint64{1, 2, 3})
	if got := a.match(n, []uint64{1, 2, 4}); got != 2 {
		t.Fatalf("match %d, want 2", got)
	}
	time.Sleep(60 * time.Millisecond)
	if got := a.match(n, []uint64{1, 2, 3}); got != 0 {
		t.Fatalf("match %d after expiry", got)
	}
	a.add(n, make([]uint64, 500)) // beyond max: bounded
	if len(a.entries) > 100 {
		t.Fatalf("%d entries, bound 100", len(a.entries))
	}
}

// TestReadEvent checks the events the router passes on: every one as the node sent it, and an
// error for one cut off by the end of the stream.
func TestReadEvent(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
		err  error // after the events; nil at a clean end
	}{
		{"two events", "data: a\n\ndata: b\n\n", []string{"data: a\n\n", "data: b\n\n"}, nil},
		{"crlf", "data: a\r\n\r\n", []string{"data: a\r\n\r\n"}, nil},
		{"multi-line event", "event: x\ndata: a\n\n", []string{"event: x\ndata: a\n\n"}, nil},
		{"keep-alive comment", ": ping\n\ndata: a\n\n", []string{": ping\n\n", "data: a\n\n"}, nil},
		{"blank lines between", "\n\ndata: a\n\n\n", []string{"data: a\n\n"}, nil},
		{"truncated", "data: a\n\ndata: {\"cho", []string{"data: a\n\n"}, io.ErrUnexpectedEOF},
		{"line without end", "data: a\n", nil, io.ErrUnexpectedEOF},
		{"long event", "data: " + strings.Repeat("x", 100000) + "\n\n", []string{"data: " + strings.Repeat("x", 100000) + "\n\n"}, nil},
		{"too large", "data: " + strings.Repeat("x", maxEvent) + "\n\n", nil, sse.ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Small reads: events straddle them.
			rd := newEventReader(iotest.HalfReader(strings.NewReader(tc.in)))
			var got []string
			for rd.Next() {
				got = append(got, string(rd.Raw()))
			}
			err := rd.Err()
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("events %q, err %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// TestDecidePeerCredit: with PeerCredit, nodes of one KV identity count a prefix their peer
// holds as mostly cached, so a busy node's tenant spreads to a less loaded peer.
func TestDecidePeerCredit(t *testing.T) {
	prompt := make([]int32, 20*16) // 20 blocks, 320 tokens
	for i := range prompt {
		prompt[i] = int32(i)
	}
	chain := prefixhash.Chain(nil, prompt, 16)
	type nodeState struct {
		cachedBlocks, running int
		ident                 string
	}
	tests := []struct {
		name   string
		credit float64
		nodes  [3]nodeState
		want   int
		reason string
	}{
		// a: 320 − 16×8 = 192; b: 0 − 0: the prefix pins the tenant without credit.
		{"no credit: pinned", 0, [3]nodeState{{20, 8, "m"}, {0, 0, "m"}, {0, 4, "m"}}, 0, ReasonPrefix},
		// b: 0.9×320 = 288 > 192: it fetches the prefix from a.
		{"credit: spread to the idle peer", 0.9, [3]nodeState{{20, 8, "m"}, {0, 0, "m"}, {0, 4, "m"}}, 1, ReasonPeer},
		// a: 320 − 16 = 304; b: 288: a light load keeps the tenant.
		{"credit: a light load stays", 0.9, [3]nodeState{{20, 1, "m"}, {0, 0, "m"}, {0, 4, "m"}}, 0, ReasonPrefix},
		// b is of another identity (model): no credit, a keeps it; c is loaded.
		{"another identity gets nothing", 0.9, [3]nodeState{{20, 8, "m"}, {0, 0, "other"}, {0, 13, "m"}}, 0, ReasonPrefix},
		{"a node without an identity gets nothing", 0.9, [3]nodeState{{20, 8, "m"}, {0, 0, ""}, {0, 13, "m"}}, 0, ReasonPrefix},
		// b holds 10 blocks itself: credit for the 10 it lacks.
		{"credit for the missing part", 0.5, [3]nodeState{{20, 8, "m"}, {10, 0, "m"}, {0, 20, "m"}}, 1, ReasonPeer},
	}
	urls := []string{"http://a:1", "http://b:1", "http://c:1"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(Config{Prompter: &Prompter{}, Nodes: urls, Logger: quiet, PeerCredit: tc.credit})
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.nodes {
				n := r.nodes[urls[i]]
				n.healthy = true
				n.status = fleet.Status{ID: n.label, BlockSize: 16, MaxRunning: 16, KVIdentity: s.ident, Load: fleet.Load{Running: s.running}}
				n.statusAt = time.Now()
				r.recent.add(n, chain[:s.cachedBlocks])
			}
			d := r.decide(context.Background(), prompt, 10)
			if got := d.order[0].n.label; got != []string{"a:1", "b:1", "c:1"}[tc.want] || d.reason != tc.reason {
				t.Fatalf("chose %s (%s), want %s (%s); scores %v", got, d.reason, []string{"a:1", "b:1", "c:1"}[tc.want], tc.reason, scores(d))
			}
		})
	}
	if _, err := New(Config{Prompter: &Prompter{}, Nodes: urls, Logger: quiet, PeerCredit: 1.5}); err == nil {
		t.Fatal("PeerCredit 1.5 accepted")
	}
}
