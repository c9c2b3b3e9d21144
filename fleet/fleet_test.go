package fleet

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ubatch/internal/testkit"
	"ubatch/internal/testredis"
	"ubatch/kvcache"
	"ubatch/prefixhash"
	"ubatch/quant"
)

const bs = 4

// node is a KV cache whose events feed a tracker, as in `ubatch serve --redis`.
type node struct {
	t  *testing.T
	c  *kvcache.Manager
	tr *Tracker
}

func newNode(t *testing.T, blocks int) *node {
	tr := NewTracker(blocks)
	c, err := kvcache.NewManager(kvcache.Config{NLayers: 1, KVDim: 2, BlockSize: bs, NumBlocks: blocks, MaxSeqs: 4,
		DType: quant.F32, OnBlock: tr.OnBlock})
	if err != nil {
		t.Fatal(err)
	}
	return &node{t: t, c: c, tr: tr}
}

// prefill decodes toks into the empty sequence seq (after attaching its cached prefix).
func (n *node) prefill(seq int, toks []int32) {
	n.t.Helper()
	start, err := n.c.AttachPrefix(seq, toks)
	if err != nil {
		n.t.Fatal(err)
	}
	rest := toks[start:]
	pos := make([]int32, len(rest))
	seqs := make([][]int32, len(rest))
	for i := range rest {
		pos[i], seqs[i] = int32(start+i), []int32{int32(seq)}
	}
	if err := n.c.Reserve(rest, pos, seqs, make([]int32, len(rest))); err != nil {
		n.t.Fatal(err)
	}
}

func tokens(n int, base int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = base + int32(i)
	}
	return s
}

func sorted(h []uint64) []uint64 { slices.Sort(h); return h }

func TestTrackerFollowsTheCache(t *testing.T) {
	n := newNode(t, 8)
	a := tokens(10, 100) // two full blocks and a partial one
	n.prefill(0, a)
	if got, want := sorted(n.tr.Snapshot()), sorted(prefixhash.Chain(nil, a, bs)); !slices.Equal(got, want) {
		t.Fatalf("tracked %x, want the prompt's chain %x", got, want)
	}
	// The same prompt again: shared blocks, nothing new.
	n.prefill(1, a)
	if n.tr.Len() != 2 {
		t.Fatalf("tracked %d blocks after a repeat, want 2", n.tr.Len())
	}
	// Freed sequences keep their blocks cached; filling the cache with other prompts evicts them.
	n.c.SeqFree(0)
	n.c.SeqFree(1)
	b := tokens(32, 500)
	n.prefill(2, b)
	if got, want := sorted(n.tr.Snapshot()), sorted(prefixhash.Chain(nil, b, bs)); !slices.Equal(got, want) {
		t.Fatalf("after eviction tracked %x, want %x", got, want)
	}
	n.c.Clear()
	if n.tr.Len() != 0 {
		t.Fatalf("%d blocks tracked after Clear", n.tr.Len())
	}
	if n.tr.Dropped() != 0 {
		t.Fatalf("%d changes dropped", n.tr.Dropped())
	}
}

func TestTrackerAllocatesNothingPerBlock(t *testing.T) {
	tr := NewTracker(16)
	toks := tokens(bs, 1)
	ev := kvcache.BlockEvent{Kind: kvcache.BlockStored, Hash: 42, Tokens: toks}
	rm := kvcache.BlockEvent{Kind: kvcache.BlockRemoved, Hash: 42}
	tr.OnBlock(ev)
	tr.OnBlock(rm)
	drain := func() {
		for len(tr.deltas) > 0 {
			<-tr.deltas
		}
	}
	if a := testing.AllocsPerRun(200, func() { tr.OnBlock(ev); tr.OnBlock(rm); drain() }); a != 0 {
		t.Fatalf("%v allocations per stored+removed block", a)
	}
}

type fixture struct {
	t     *testing.T
	redis *testredis.Server
	node  *node
	pub   *Publisher
	index *Index
	load  atomic.Int64
	stop  context.CancelFunc
	done  chan struct{}
}

func newFixture(t *testing.T, rs *testredis.Server, blocks int) *fixture {
	f := &fixture{t: t, redis: rs, node: newNode(t, blocks)}
	rdb, err := NewClient(rs.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	f.pub, err = NewPublisher(PublisherConfig{Redis: rdb, Namespace: "test", Tracker: f.node.tr, NodeID: "n1",
		URL: "http://127.0.0.1:1", Model: "m", BlockSize: bs, MaxBody: 1000, MaxRunning: 4,
		Load: func() Load { return Load{Running: int(f.load.Load())} },
		TTL:  2 * time.Second, Heartbeat: 50 * time.Millisecond, Flush: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	f.index = NewIndex(rs.Client(), "test")
	return f
}

func (f *fixture) run() {
	ctx, cancel := context.WithCancel(context.Background())
	f.stop, f.done = cancel, make(chan struct{})
	go func() { defer close(f.done); f.pub.Run(ctx) }()
	f.t.Cleanup(func() { f.stop(); <-f.done })
}

func (f *fixture) match(toks []int32) int {
	m, err := f.index.Match(context.Background(), []string{"n1"}, prefixhash.Chain(nil, toks, bs))
	if err != nil {
		f.t.Fatal(err)
	}
	return m[0]
}

func TestPublisherMirrorsTheCacheInRedis(t *testing.T) {
	rs := testredis.Start(t)
	f := newFixture(t, rs, 8)
	f.run()
	a := tokens(13, 7) // three full blocks
	f.node.prefill(0, a)
	testkit.Eventually(t, 5*time.Second, "the prompt's blocks in Redis", func() bool { return f.match(a) == 3 })
	longer := append(slices.Clone(a[:8]), 99, 98, 97, 96)
	if got := f.match(longer); got != 2 {
		t.Fatalf("a prompt sharing two blocks matches %d", got)
	}
	if got := f.match(tokens(12, 1000)); got != 0 {
		t.Fatalf("an unrelated prompt matches %d blocks", got)
	}

	f.load.Store(3)
	testkit.Eventually(t, 5*time.Second, "the status", func() bool {
		nodes, bad, err := f.index.Nodes(context.Background())
		return err == nil && bad == 0 && len(nodes) == 1 && nodes[0].Running == 3 && nodes[0].BlockSize == bs &&
			nodes[0].MaxBody == 1000 && nodes[0].Blocks == 3 && nodes[0].URL == "http://127.0.0.1:1"
	})
	if ttl := rs.Client().TTL(context.Background(), "test:node:n1:blocks").Val(); ttl <= 0 || ttl > 2*time.Second {
		t.Fatalf("block set TTL %v, want in (0, 2s]", ttl)
	}

	// Evict: the set follows.
	f.node.c.SeqFree(0)
	b := tokens(32, 3000)
	f.node.prefill(1, b)
	testkit.Eventually(t, 5*time.Second, "evicted blocks leave Redis", func() bool { return f.match(a) == 0 && f.match(b) == 8 })

	// Redis restarts empty: the publisher notices and rewrites the set.
	rs.Restart()
	testkit.Eventually(t, 5*time.Second, "the set rewritten after a Redis restart", func() bool { return f.match(b) == 8 })
	if v := testutil.ToFloat64(f.pub.m.resyncs); v < 2 {
		t.Fatalf("%v resyncs, want the first one and one after the restart", v)
	}

	// A stopping node removes itself.
	f.stop()
	<-f.done
	if n, _, _ := f.index.Nodes(context.Background()); len(n) != 0 {
		t.Fatalf("%d nodes listed after the node left", len(n))
	}
	if got := f.match(b); got != 0 {
		t.Fatalf("the departed node still matches %d blocks", got)
	}
}

func TestPublisherSurvivesRedisOutage(t *testing.T) {
	rs := testredis.Start(t)
	f := newFixture(t, rs, 8)
	rs.Stop()
	f.run()
	a := tokens(8, 1)
	f.node.prefill(0, a) // serving goes on: the hook never waits for Redis
	testkit.Eventually(t, 5*time.Second, "failures counted", func() bool { return testutil.ToFloat64(f.pub.m.failures) >= 2 })
	rs.Restart()
	testkit.Eventually(t, 5*time.Second, "the blocks published once Redis is back", func() bool { return f.match(a) == 2 })
}

func TestDroppedChangesAreRepairedByAResync(t *testing.T) {
	rs := testredis.Start(t)
	f := newFixture(t, rs, 8)
	// More changes than the queue holds, before the publisher runs: some are dropped.
	tr := f.node.tr
	for i := range deltaQueue + 100 {
		tr.OnBlock(kvcache.BlockEvent{Kind: kvcache.BlockStored, Hash: uint64(i + 1), Tokens: tokens(bs, int32(i))})
	}
	for i := range 50 {
		tr.OnBlock(kvcache.BlockEvent{Kind: kvcache.BlockRemoved, Hash: uint64(i + 1)})
	}
	if tr.Dropped() != 150 {
		t.Fatalf("%d changes dropped, want 150", tr.Dropped())
	}
	f.run()
	want := tr.Snapshot()
	testkit.Eventually(t, 5*time.Second, "Redis equal to the tracker", func() bool {
		got, err := f.index.Members(context.Background(), "n1")
		if err != nil || len(got) != len(want) {
			return false
		}
		for _, h := range want {
			if !got[h] {
				return false
			}
		}
		return true
	})
}

func TestNewPublisherRejectsBadConfig(t *testing.T) {
	rdb, _ := NewClient("redis://127.0.0.1:1")
	defer rdb.Close()
	tr := NewTracker(1)
	load := func() Load { return Load{} }
	tests := []struct {
		name string
		cfg  PublisherConfig
	}{
		{"no redis", PublisherConfig{Tracker: tr, Load: load, NodeID: "a", URL: "u"}},
		{"no tracker", PublisherConfig{Redis: rdb, Load: load, NodeID: "a", URL: "u"}},
		{"empty id", PublisherConfig{Redis: rdb, Tracker: tr, Load: load, URL: "u"}},
		{"id with a colon", PublisherConfig{Redis: rdb, Tracker: tr, Load: load, NodeID: "a:b", URL: "u"}},
		{"no url", PublisherConfig{Redis: rdb, Tracker: tr, Load: load, NodeID: "a", BlockSize: 4}},
		{"no block size", PublisherConfig{Redis: rdb, Tracker: tr, Load: load, NodeID: "a", URL: "u"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewPublisher(tc.cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if _, err := NewClient("http://nope"); err == nil {
		t.Fatal("NewClient accepted an http URL")
	}
}

func TestIndexSkipsBadEntries(t *testing.T) {
	rs := testredis.Start(t)
	c := rs.Client()
	ctx := context.Background()
	c.SAdd(ctx, "test:nodes", "good", "garbage", "wrongid", "dead")
	c.Set(ctx, "test:node:good", `{"id":"good","url":"http://x","block_size":16}`, 0)
	c.Set(ctx, "test:node:garbage", `{not json`, 0)
	c.Set(ctx, "test:node:wrongid", `{"id":"other","url":"http://x","block_size":16}`, 0)
	nodes, bad, err := NewIndex(c, "test").Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0].ID != "good" || bad != 2 {
		t.Fatalf("nodes %+v, bad %d; want only good, 2 bad", nodes, bad)
	}
}

// TestDeadNodeEntriesExpire: a node that stops heartbeating (here: its Redis connection is gone,
// so it cannot even remove itself) disappears from the index within its TTL.
func TestDeadNodeEntriesExpire(t *testing.T) {
	rs := testredis.Start(t)
	f := newFixture(t, rs, 8)
	f.run()
	a := tokens(8, 1)
	f.node.prefill(0, a)
	testkit.Eventually(t, 5*time.Second, "the blocks published", func() bool { return f.match(a) == 2 })
	f.pub.cfg.Redis.Close()
	start := time.Now()
	testkit.Eventually(t, 5*time.Second, "the dead node's entries expired", func() bool {
		n, _, err := f.index.Nodes(context.Background())
		return err == nil && len(n) == 0 && f.match(a) == 0
	})
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("entries lasted %v with a 2 s TTL", d)
	}
}
