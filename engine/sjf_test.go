package engine

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// orderRecorder records, on the engine goroutine and so in the engine's order, the prompt
// length of every request admitted for the first time and of every request that finished.
type orderRecorder struct {
	stepRecorder
	mu                 sync.Mutex
	admitted, finished []int
}

func (r *orderRecorder) Admitted(_ time.Duration, prompt, _ int) {
	r.mu.Lock()
	r.admitted = append(r.admitted, prompt)
	r.mu.Unlock()
}

func (r *orderRecorder) Finished(_ FinishReason, u Usage) {
	r.mu.Lock()
	r.finished = append(r.finished, u.PromptTokens)
	r.mu.Unlock()
}

func (r *orderRecorder) orders() (admitted, finished []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.admitted), slices.Clone(r.finished)
}

var _ Observer = (*orderRecorder)(nil)

// TestShortFirstAtAdmission: one sequence slot, a 60-token request running, two requests queued
// behind it in the order given. SJF admits (and so finishes) the cheaper one first, whatever the
// arrival order: its prompt tokens not in the KV cache plus its max_tokens; FCFS keeps arrival.
func TestShortFirstAtAdmission(t *testing.T) {
	const running = 60 // the running request's prompt (seed 1), which "cached" repeats
	type queued struct{ prompt, maxTokens int }
	tests := []struct {
		name   string
		policy Policy
		queued [2]queued
		want   []int // prompt lengths in admission order, the running one's first
	}{
		{name: "sjf: short passes long", policy: SJF, queued: [2]queued{{40, 8}, {4, 2}}, want: []int{running, 4, 40}},
		{name: "fcfs: arrival order", policy: FCFS, queued: [2]queued{{40, 8}, {4, 2}}, want: []int{running, 40, 4}},
		// 12+2 against 4+40: the expected completion counts, not the prompt alone.
		{name: "sjf: max_tokens counts", policy: SJF, queued: [2]queued{{4, 40}, {12, 2}}, want: []int{running, 12, 4}},
		// The running request's own prompt is in the cache: 1+4 against 20+4.
		{name: "sjf: a cached prompt is cheap", policy: SJF, queued: [2]queued{{20, 4}, {running, 4}}, want: []int{running, running, 20}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newFake(t, 256, 4, 2)
			d.delay = time.Millisecond
			rec := &orderRecorder{}
			e := start(t, d, Limits{NCtx: 1024, NSeqMax: 2, NBatch: 64, Vocab: vocab},
				Config{MaxRunning: 1, Policy: tc.policy, Observer: rec})
			ctx := context.Background()
			first := prompt(running, 1)
			blocker, err := e.Submit(ctx, Request{Prompt: first, MaxTokens: 30, Sampling: greedy()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := blocker.Recv(ctx); err != nil { // admitted, its prompt computed
				t.Fatal(err)
			}
			var streams []*Stream
			var prompts [][]int32
			for i, q := range tc.queued {
				p := prompt(q.prompt, int32(2+i))
				if q.prompt == running {
					p = first
				}
				s, err := e.Submit(ctx, Request{Prompt: p, MaxTokens: q.maxTokens, Sampling: greedy()})
				if err != nil {
					t.Fatal(err)
				}
				streams, prompts = append(streams, s), append(prompts, p)
			}
			collect(t, blocker)
			for i, s := range streams {
				if got, _ := collect(t, s); !slices.Equal(got, expected(prompts[i], tc.queued[i].maxTokens)) {
					t.Fatalf("queued request %d: output %v", i, got)
				}
			}
			admitted, finished := rec.orders()
			if !slices.Equal(admitted, tc.want) || !slices.Equal(finished, tc.want) {
				t.Fatalf("admitted %v, finished %v (prompt lengths), want %v", admitted, finished, tc.want)
			}
		})
	}
}

// TestAgingBoundsTheWait: one sequence slot, three clients keeping a flood of short requests
// (prompt 4, max_tokens 2: 8 ms each on the fake clock) waiting, and one victim request
// submitted among them. With the bound in force the victim finishes after at most
// bound/8ms + 4 flood requests (those already waiting or running when it came); without it,
// after nearly every flood request left.
func TestAgingBoundsTheWait(t *testing.T) {
	const (
		flood     = 40
		perFlood  = 8 * time.Millisecond // the fake step cost of one flood request, at least
		boundWait = 80 * time.Millisecond
	)
	tests := []struct {
		name           string
		policy         Policy
		maxWait, aging time.Duration
		floodPriority  Priority
		victim         Request // its prompt length tells it apart
		starved        bool
	}{
		{name: "sjf: short ones cannot starve a long one past MaxWait", policy: SJF, maxWait: boundWait, aging: -1,
			victim: Request{Prompt: prompt(40, 50), MaxTokens: 8}},
		{name: "sjf without a bound: the long one waits for all", policy: SJF, maxWait: -1, aging: -1,
			victim: Request{Prompt: prompt(40, 50), MaxTokens: 8}, starved: true},
		{name: "fcfs: a flood of high priority cannot starve a normal one", policy: FCFS, aging: boundWait,
			floodPriority: PriorityHigh, victim: Request{Prompt: prompt(5, 50), MaxTokens: 2}},
		{name: "fcfs without aging: the normal one waits for all", policy: FCFS, aging: -1,
			floodPriority: PriorityHigh, victim: Request{Prompt: prompt(5, 50), MaxTokens: 2}, starved: true},
		// Two levels to climb at 40 ms each, and MaxWait: 80 ms.
		{name: "sjf: a long low-priority one under a high flood", policy: SJF, maxWait: boundWait, aging: boundWait / 2,
			floodPriority: PriorityHigh, victim: Request{Prompt: prompt(40, 50), MaxTokens: 8, Priority: PriorityLow}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newTimed(t, 256, 4, 4)
			d.delay = time.Millisecond // real time for the clients to queue their next request
			rec := &orderRecorder{}
			e := startTimed(t, d, Limits{NCtx: 1024, NSeqMax: 4, NBatch: 64, Vocab: vocab},
				Config{MaxRunning: 1, Policy: tc.policy, MaxWait: tc.maxWait, PriorityAging: tc.aging, Observer: rec})
			ctx := context.Background()
			var submitted atomic.Int64
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					for n := submitted.Add(1); n <= flood; n = submitted.Add(1) {
						s, err := e.Submit(ctx, Request{Prompt: prompt(4, int32(n)), MaxTokens: 2, Sampling: greedy(), Priority: tc.floodPriority})
						if err != nil {
							t.Error(err)
							return
						}
						collect(t, s)
					}
				})
			}
			for _, f := rec.orders(); len(f) < 2; _, f = rec.orders() {
				time.Sleep(100 * time.Microsecond)
			}
			_, before := rec.orders()
			victim := tc.victim
			victim.Sampling = greedy()
			s, err := e.Submit(ctx, victim)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := collect(t, s); !slices.Equal(got, expected(victim.Prompt, victim.MaxTokens)) {
				t.Fatalf("victim output %v", got)
			}
			wg.Wait()
			_, finished := rec.orders()
			at := slices.Index(finished, len(victim.Prompt))
			passed := at - len(before) // flood requests finished after the victim came, before it
			left := flood - len(before)
			t.Logf("%d of the %d flood requests left finished before the victim", passed, left)
			if limit := int(boundWait/perFlood) + 4; !tc.starved && passed > limit {
				t.Fatalf("%d flood requests finished before the victim, want at most %d", passed, limit)
			}
			if tc.starved && passed < left-6 {
				t.Fatalf("only %d of %d flood requests finished before the unprotected victim: the test does not starve it", passed, left)
			}
		})
	}
}

// TestAgedPriorityDoesNotPreempt: a low-priority request that has aged past the running
// normal one's priority waits for its slot; it does not preempt it (makeRoom compares own
// priorities).
func TestAgedPriorityDoesNotPreempt(t *testing.T) {
	tests := []struct {
		name  string
		aging time.Duration
	}{
		{name: "aged past the running one", aging: 10 * time.Millisecond}, // the runner takes 40 steps of 4 ms
		{name: "no aging", aging: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newTimed(t, 256, 4, 2)
			d.delay = 100 * time.Microsecond
			rec := &orderRecorder{}
			e := startTimed(t, d, Limits{NCtx: 1024, NSeqMax: 2, NBatch: 64, Vocab: vocab},
				Config{MaxRunning: 1, PriorityAging: tc.aging, Observer: rec})
			ctx := context.Background()
			run, err := e.Submit(ctx, Request{Prompt: prompt(6, 1), MaxTokens: 40, Sampling: greedy()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := run.Recv(ctx); err != nil {
				t.Fatal(err)
			}
			low, err := e.Submit(ctx, Request{Prompt: prompt(3, 2), MaxTokens: 2, Sampling: greedy(), Priority: PriorityLow})
			if err != nil {
				t.Fatal(err)
			}
			_, last := collect(t, run)
			collect(t, low)
			if _, finished := rec.orders(); last.Usage.Preemptions != 0 || !slices.Equal(finished, []int{6, 3}) {
				t.Fatalf("running request preempted %d times, finish order %v (prompt lengths)", last.Usage.Preemptions, finished)
			}
		})
	}
}
