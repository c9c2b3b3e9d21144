package engine

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestIdenticalPromptsShareThePartialBlock is n > 1: identical 44-token prompts submitted together,
// blocks of 16. The first computes the prompt; the others wait for it and then take 43 tokens
// from the cache, copying the 11 shared cells of its partly filled third block.
func TestIdenticalPromptsShareThePartialBlock(t *testing.T) {
	d := newFake(t, 64, 16, 8)
	d.delay = time.Millisecond
	e := start(t, d, Limits{NCtx: 1024, NSeqMax: 8, NBatch: 64, Vocab: vocab}, Config{BatchSize: 64, ChunkSize: 16})
	p := prompt(44, 3)
	cached := burstOf(t, e, 6, 2, func(int) []int32 { return p })
	if want := []int{0, 43, 43, 43, 43, 43}; !slices.Equal(cached, want) {
		t.Fatalf("cached tokens %v, want %v", cached, want)
	}
}

// TestTinyPoolDoesNotThrash sends 40 requests at once to a KV pool of 24 blocks of 4 cells,
// which holds two or three of them at full length: admission sets aside the running sequences'
// growth, so preemption stays the exception, and every output equals the request's alone-run.
// Without the watermark the same run preempted sequences about 160 times.
func TestTinyPoolDoesNotThrash(t *testing.T) {
	d := newFake(t, 24, 4, 8)
	d.delay = 100 * time.Microsecond
	e := start(t, d, Limits{NCtx: 96, NSeqMax: 8, NBatch: 64, Vocab: vocab},
		Config{BatchSize: 32, ChunkSize: 8, MaxQueue: 64})
	const n = 40
	var wg sync.WaitGroup
	preempted := make([]int, n)
	for i := range n {
		wg.Go(func() {
			p := prompt(4+i%17, int32(i))
			max := 8 + (i*7)%33
			s, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: max, Sampling: greedy()})
			if err != nil {
				t.Error(err)
				return
			}
			got, last := collect(t, s)
			if want := expected(p, max); !slices.Equal(got, want) || last.Finish != FinishLength {
				t.Errorf("request %d: got %v (finish %s %v), want %v", i, got, last.Finish, last.Err, want)
			}
			preempted[i] = last.Usage.Preemptions
		})
	}
	wg.Wait()
	waitIdle(t, e)
	total := 0
	for _, p := range preempted {
		total += p
	}
	if st := e.Stats(); uint64(total) != st.Preemptions {
		t.Fatalf("per-request preemptions add up to %d, the engine counted %d", total, st.Preemptions)
	}
	t.Logf("%d preemptions for %d requests", total, n)
	if total > n/10 {
		t.Fatalf("%d preemptions for %d requests: admission thrashes the pool", total, n)
	}
}

// TestPriorityPreemption: a request of higher priority that finds every sequence slot or the KV
// pool taken preempts a running one of lower priority (which later resumes with its output
// unchanged); one of equal priority waits its turn.
func TestPriorityPreemption(t *testing.T) {
	tests := []struct {
		name              string
		seqs, blocks      int
		firstPrompt       int
		first, second     Priority
		wantSecondFirst   bool
		wantPreemptedOnce bool
	}{
		{name: "slots full", seqs: 1, blocks: 64, firstPrompt: 4, first: PriorityLow, second: PriorityHigh, wantSecondFirst: true, wantPreemptedOnce: true},
		// Two slots, but the first request's prompt and growth claim 15 of 16 blocks.
		{name: "kv full", seqs: 2, blocks: 16, firstPrompt: 40, first: PriorityNormal, second: PriorityHigh, wantSecondFirst: true, wantPreemptedOnce: true},
		{name: "equal priority waits", seqs: 1, blocks: 64, firstPrompt: 4, first: PriorityNormal, second: PriorityNormal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newFake(t, tc.blocks, 4, tc.seqs)
			d.delay = time.Millisecond
			e := start(t, d, Limits{NCtx: tc.blocks * 4, NSeqMax: tc.seqs, NBatch: 64, Vocab: vocab}, Config{MaxQueue: 8})
			ctx := context.Background()
			p1, p2 := prompt(tc.firstPrompt, 1), prompt(20, 2)
			s1, err := e.Submit(ctx, Request{Prompt: p1, MaxTokens: 20, Sampling: greedy(), Priority: tc.first})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s1.Recv(ctx); err != nil {
				t.Fatal(err)
			}
			s2, err := e.Submit(ctx, Request{Prompt: p2, MaxTokens: 4, Sampling: greedy(), Priority: tc.second})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var order []int
			var last [2]Output
			var got [2][]int32
			var wg sync.WaitGroup
			for i, s := range []*Stream{s1, s2} {
				wg.Go(func() {
					got[i], last[i] = collect(t, s)
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
				})
			}
			wg.Wait()
			if !slices.Equal(got[0], expected(p1, 20)[1:]) || !slices.Equal(got[1], expected(p2, 4)) {
				t.Fatalf("outputs %v, %v", got[0], got[1])
			}
			if secondFirst := order[0] == 1; secondFirst != tc.wantSecondFirst {
				t.Fatalf("finish order %v", order)
			}
			if p := last[0].Usage.Preemptions; (p == 1) != tc.wantPreemptedOnce || last[1].Usage.Preemptions != 0 {
				t.Fatalf("preemptions: first %d, second %d", p, last[1].Usage.Preemptions)
			}
		})
	}
}

// TestRepeatedPromptCachedBut1 sends one prompt six times, one after the other, with blocks of 16
// and max_tokens 4 (so the first request's last block ends mid-block for most lengths): every
// request after the first takes all but the last prompt token from the cache (that one is
// computed for its logits), whether the prompt ends mid-block (the freed sequence's last block
// is kept) or on a block boundary.
func TestRepeatedPromptCachedBut1(t *testing.T) {
	tests := []struct {
		name string
		n    int
	}{
		{name: "inside the first block", n: 5},
		{name: "mid-block, filled by none", n: 36},
		{name: "mid-block, one cell", n: 33},
		{name: "mid-block, last cell", n: 47},
		{name: "block-aligned", n: 32},
		{name: "block-aligned plus the generated tokens", n: 45},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newFake(t, 64, 16, 2)
			e := start(t, d, Limits{NCtx: 1024, NSeqMax: 2, NBatch: 64, Vocab: vocab}, Config{})
			p := prompt(tc.n, 7)
			var cached []int
			for range 6 {
				s, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 4, Sampling: greedy()})
				if err != nil {
					t.Fatal(err)
				}
				got, last := collect(t, s)
				if !slices.Equal(got, expected(p, 4)) {
					t.Fatalf("output %v, want %v", got, expected(p, 4))
				}
				cached = append(cached, last.Usage.CachedTokens)
			}
			want := []int{0, tc.n - 1, tc.n - 1, tc.n - 1, tc.n - 1, tc.n - 1}
			if !slices.Equal(cached, want) {
				t.Fatalf("cached tokens %v, want %v", cached, want)
			}
			// One full-block chain and one kept partial block, not six copies of it. The stats are
			// published after the step that sent the final output: wait for them.
			waitIdle(t, e)
			if st := e.Stats().KV; st.Used != 0 || st.Cached > (tc.n+3+15)/16 {
				t.Fatalf("KV after the runs: %+v", st)
			}
		})
	}
}
