package engine

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"ubatch/kvcache"
	"ubatch/kvfile"
)

// memTier is a tier in memory: a BlockSource and BlockSink over a map of blocks by Key, with
// reads that cost nothing, so the cost model always prefers them.
type memTier struct {
	mu     sync.Mutex
	blocks map[kvcache.Key]kvfile.Block
	swaps  int // blocks put as a swapped-out sequence's
	puts   int
}

func (m *memTier) Name() string { return "mem" }

func (m *memTier) Want(k kvcache.Key) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.blocks[k]
	return !ok
}

func (m *memTier) Put(b kvfile.Block, swap bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blocks[b.Key] = b
	m.puts++
	if swap {
		m.swaps++
	}
}

func (m *memTier) Probe(q *Lookup) Hit {
	m.mu.Lock()
	defer m.mu.Unlock()
	var h Hit
	for d := q.From; d < len(q.Keys); d++ {
		b, ok := m.blocks[q.Keys[d]]
		if !ok {
			break
		}
		h.Blocks++
		h.Cells += len(b.Tokens)
	}
	return h
}

func (m *memTier) Fetch(_ context.Context, q *Lookup, h Hit) ([]kvfile.Block, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []kvfile.Block
	for d := q.From; d < q.From+h.Blocks; d++ {
		out = append(out, m.blocks[q.Keys[d]])
	}
	return out, nil
}

func (m *memTier) ReadCost(int64) time.Duration { return 0 }

// tierRecorder is a stepRecorder that also counts the tiers' traffic.
type tierRecorder struct {
	stepRecorder
	mu              sync.Mutex
	fetched, swapIn int
	swappedOut      int
}

func (r *tierRecorder) TierFetched(_ string, blocks int, _ int64, _ time.Duration, swapIn bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fetched += blocks
	if swapIn {
		r.swapIn++
	}
}

func (r *tierRecorder) TierSwappedOut(blocks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.swappedOut += blocks
}

// TestSwapOutAndIn preempts a low-priority sequence when the cost model says a read beats a
// recompute: its blocks go to the tier (swap-out), and when it is admitted again after the
// high-priority request took its memory, they come back from the tier (swap-in) instead of
// being recomputed, and it completes with the greedy tokens it would have had.
func TestSwapOutAndIn(t *testing.T) {
	d := newFake(t, 10, 4, 2)
	d.delay = time.Millisecond
	rec := &tierRecorder{}
	e, err := New(d, Limits{NCtx: 40, NSeqMax: 2, NBatch: 64, Vocab: vocab}, Config{MaxQueue: 8, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	d.kv = e.kv.(*kvcache.Manager)
	tier := &memTier{blocks: map[kvcache.Key]kvfile.Block{}}
	if !e.SetTiers([]BlockSource{tier}, tier, kvfile.Layout{}) {
		t.Fatal("SetTiers refused")
	}
	// A fitted cost model in which a prompt token costs 10 ms: far more than the tier's reads.
	for i := range 2 * minFitSteps {
		p := 8 * (i + 1)
		e.cost.observe(features(0, p, 0, 0), 0.01*float64(p))
	}
	if !e.cost.ready() {
		t.Fatal("cost model not ready")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go e.Run(ctx)
	defer func() { cancel(); <-e.Done() }()

	lowPrompt := prompt(12, 1)
	low, err := e.Submit(ctx, Request{Prompt: lowPrompt, MaxTokens: 20, Sampling: greedy(), Priority: PriorityLow})
	if err != nil {
		t.Fatal(err)
	}
	for range 6 { // low is decoding, its prompt's blocks full and hashed
		if _, err := low.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	high, err := e.Submit(ctx, Request{Prompt: prompt(20, 2), MaxTokens: 14, Sampling: greedy(), Priority: PriorityHigh})
	if err != nil {
		t.Fatal(err)
	}
	got, last := collect(t, low)
	if want := expected(lowPrompt, 20)[6:]; !slices.Equal(got, want) || last.Finish != FinishLength {
		t.Fatalf("low after its swap: %v (%s), want %v", got, last.Finish, want)
	}
	collect(t, high)
	if last.Usage.Preemptions == 0 {
		t.Fatal("low was never preempted: the test did not exercise a swap")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	tier.mu.Lock()
	defer tier.mu.Unlock()
	if rec.swappedOut == 0 || tier.swaps != rec.swappedOut {
		t.Fatalf("swapped out %d blocks, the tier got %d as swaps", rec.swappedOut, tier.swaps)
	}
	if rec.swapIn == 0 || rec.fetched == 0 {
		t.Fatalf("no swap-in: %d blocks fetched, %d swap-ins", rec.fetched, rec.swapIn)
	}
}
