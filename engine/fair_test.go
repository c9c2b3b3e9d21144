package engine

import (
	"context"
	"slices"
	"testing"
	"time"
)

// fairSeq is a sequence of the bookkeeping tests: client, priority (its standing), tokens in
// the cache, admission order, and the request it belongs to (sequences of one request share
// a stream).
type fairSeq struct {
	client  string
	level   Priority
	tokens  int
	arrival uint64
	req     int
}

// fairEngine is an engine that is not run, with running sequences rs (of requests whose
// sequences set aside growth of 8 tokens: MaxTokens), for the victim choice alone.
func fairEngine(t *testing.T, rs []fairSeq) *Engine {
	t.Helper()
	e, err := New(newFake(t, 64, 16, 16), Limits{NCtx: 1024, NSeqMax: 16, NBatch: 64, Vocab: vocab}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	streams := map[int]*Stream{}
	for i, r := range rs {
		st := streams[r.req]
		if st == nil {
			st = newStream(1)
			streams[r.req] = st
		}
		e.running = append(e.running, &sequence{kvSeq: int32(i), stream: st, tokens: make([]int32, r.tokens),
			req: Request{Client: r.client, Priority: r.level, MaxTokens: 8}, level: r.level, arrival: r.arrival})
	}
	return e
}

func TestFairVictim(t *testing.T) {
	hog := func(n, tokens int) []fairSeq {
		var rs []fairSeq
		for i := range n {
			rs = append(rs, fairSeq{client: "hog", tokens: tokens, arrival: uint64(i + 1), req: 1})
		}
		return rs
	}
	tests := []struct {
		name    string
		running []fairSeq
		client  string
		prio    Priority
		tokens  int
		kv      bool
		want    uint64 // the victim's arrival; 0: none
	}{
		{name: "one client holds every slot: its newest gives way", running: hog(4, 4), client: "b", tokens: 4, want: 4},
		{name: "the client's own sequences are never its victims", running: hog(4, 4), client: "hog", tokens: 4},
		{name: "requests without a client share one identity", running: []fairSeq{{tokens: 4, arrival: 1}, {tokens: 4, arrival: 2}}, tokens: 4},
		{name: "one more than the waiting client: no swap back and forth",
			running: []fairSeq{{client: "a", tokens: 4, arrival: 1}, {client: "a", tokens: 4, arrival: 2}, {client: "b", tokens: 4, arrival: 3}},
			client:  "b", tokens: 4},
		{name: "two more than the waiting client: a swap",
			running: []fairSeq{{client: "a", tokens: 4, arrival: 1}, {client: "a", tokens: 4, arrival: 2}, {client: "a", tokens: 4, arrival: 3},
				{client: "b", tokens: 4, arrival: 4}},
			client: "b", tokens: 4, want: 3},
		{name: "the client holding the most, not the newest sequence",
			running: []fairSeq{{client: "a", tokens: 4, arrival: 1}, {client: "a", tokens: 4, arrival: 2}, {client: "c", tokens: 4, arrival: 3}},
			client:  "b", tokens: 4, want: 2},
		{name: "a sequence admitted above the waiting request's priority stays",
			running: []fairSeq{{client: "a", level: PriorityHigh, tokens: 4, arrival: 1}, {client: "a", level: PriorityHigh, tokens: 4, arrival: 2}},
			client:  "b", tokens: 4},
		{name: "the lower standing of the client goes",
			running: []fairSeq{{client: "a", level: PriorityLow, tokens: 4, arrival: 1}, {client: "a", tokens: 4, arrival: 2}},
			client:  "b", tokens: 4, want: 1},
		// By cells: a holds one long sequence (500 + 8 growth), c two short ones.
		{name: "kv: the client claiming the most cells",
			running: []fairSeq{{client: "a", tokens: 500, arrival: 1}, {client: "c", tokens: 4, arrival: 2}, {client: "c", tokens: 4, arrival: 3}},
			client:  "b", tokens: 4, kv: true, want: 1},
		{name: "slots: the client holding the most slots",
			running: []fairSeq{{client: "a", tokens: 500, arrival: 1}, {client: "c", tokens: 4, arrival: 2}, {client: "c", tokens: 4, arrival: 3}},
			client:  "b", tokens: 4, want: 3},
		{name: "kv: a waiting request claiming more than the victim's client would keep waits",
			running: []fairSeq{{client: "a", tokens: 100, arrival: 1}},
			client:  "b", tokens: 200, kv: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := fairEngine(t, tc.running)
			s := &sequence{kvSeq: -1, stream: newStream(1), tokens: make([]int32, tc.tokens),
				req: Request{Client: tc.client, Priority: tc.prio, MaxTokens: 8}}
			checkVictim(t, e.fairVictim(s, tc.kv), tc.want)
		})
	}
}

// checkVictim fails t unless v is the sequence that arrived as want (0: no victim).
func checkVictim(t *testing.T, v *sequence, want uint64) {
	t.Helper()
	got := uint64(0)
	if v != nil {
		got = v.arrival
	}
	if got != want {
		t.Fatalf("victim %d, want %d (0: none)", got, want)
	}
}

func TestOverdueVictim(t *testing.T) {
	const maxWait = 10 * time.Second
	now := time.Unix(1000, 0)
	tests := []struct {
		name   string
		waited time.Duration
		ran    []time.Duration // since each running sequence's admission, arrival i+1
		level  Priority        // the waiting request's aged priority
		levels []Priority      // the running ones' standing (default normal)
		sameAs int             // 1-based running sequence whose request the waiting one is (0: none)
		want   uint64
	}{
		{name: "not waited long enough", waited: maxWait - time.Millisecond, ran: []time.Duration{time.Minute}},
		{name: "waited: the one that ran its slice", waited: maxWait, ran: []time.Duration{time.Second, maxWait}, want: 2},
		{name: "nobody ran a whole slice", waited: time.Minute, ran: []time.Duration{time.Second, maxWait - 1}},
		{name: "never its own request's sequence", waited: time.Minute, ran: []time.Duration{time.Minute}, sameAs: 1},
		{name: "of those that ran, the lowest standing", waited: time.Minute, ran: []time.Duration{time.Minute, time.Minute},
			levels: []Priority{PriorityLow, PriorityNormal}, want: 1},
		{name: "not one standing above the waiting request", waited: time.Minute, ran: []time.Duration{time.Minute},
			levels: []Priority{PriorityHigh}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var rs []fairSeq
			for i := range tc.ran {
				r := fairSeq{client: "a", tokens: 4, arrival: uint64(i + 1), req: i + 1}
				if tc.levels != nil {
					r.level = tc.levels[i]
				}
				rs = append(rs, r)
			}
			e := fairEngine(t, rs)
			e.cfg.MaxWait = maxWait
			e.now = func() time.Time { return now }
			for i, r := range e.running {
				r.admittedAt = now.Add(-tc.ran[i])
			}
			st := newStream(1)
			if tc.sameAs > 0 {
				st = e.running[tc.sameAs-1].stream
			}
			s := &sequence{kvSeq: -1, stream: st, tokens: make([]int32, 4), level: tc.level, waitSince: now.Add(-tc.waited),
				req: Request{Client: "b", MaxTokens: 8}}
			checkVictim(t, e.overdueVictim(s), tc.want)
		})
	}
}

// TestWaitingOrderFavoursTheClientHoldingFewer: among waiting requests of one priority, the
// one of the client with fewer running sequences is admitted first, whatever the arrival.
func TestWaitingOrderFavoursTheClientHoldingFewer(t *testing.T) {
	e := fairEngine(t, []fairSeq{{client: "hog", tokens: 4, arrival: 1}, {client: "hog", tokens: 4, arrival: 2}})
	for i, c := range []string{"hog", "hog", "b", "hog"} {
		e.waiting = append(e.waiting, &sequence{kvSeq: -1, stream: newStream(1), tokens: make([]int32, 4),
			req: Request{Client: c, MaxTokens: 8}, arrival: uint64(10 + i)})
	}
	e.orderWaiting()
	var got []uint64
	for _, s := range e.waiting {
		got = append(got, s.arrival)
	}
	if want := []uint64{12, 10, 11, 13}; !slices.Equal(got, want) {
		t.Fatalf("admission order %v, want %v", got, want)
	}
}

// TestGrowthShare: a request of n > 1 sequences sets aside at most a quarter of the KV cache
// for their growth; a single sequence up to the sequence cap.
func TestGrowthShare(t *testing.T) {
	tests := []struct {
		name      string
		n         int
		maxTokens int
		want      int
	}{
		{name: "one sequence: up to the cap", n: 1, want: 1024 - 4},
		{name: "16 sequences: a quarter of 1024 cells between them", n: 16, want: 16},
		{name: "max_tokens below the share", n: 16, maxTokens: 5, want: 5},
		{name: "more sequences than the share has cells: one each", n: 512, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := fairEngine(t, nil)
			s := &sequence{kvSeq: -1, stream: newStream(tc.n), tokens: make([]int32, 4), req: Request{MaxTokens: tc.maxTokens}}
			if got := e.expectedGrowth(s); got != tc.want {
				t.Fatalf("growth %d, want %d", got, tc.want)
			}
		})
	}
}

// TestHogDoesNotStarveAnotherClient: one client's request of n = 8 holds all 8 slots and would
// decode for thousands of steps; another client's request is admitted at once (a hog sequence
// preempted for it), gets its tokens, and every hog sequence's output is still its greedy
// continuation after its preemption.
func TestHogDoesNotStarveAnotherClient(t *testing.T) {
	d := newFake(t, 512, 16, 8)
	d.delay = 200 * time.Microsecond
	e := start(t, d, Limits{NCtx: 8192, NSeqMax: 8, NBatch: 64, Vocab: vocab}, Config{MaxRunning: 8})
	ctx := context.Background()
	hogPrompt := prompt(4, 1)
	const hogTokens = 600
	reqs := make([]Request, 8)
	for i := range reqs {
		reqs[i] = Request{Prompt: hogPrompt, MaxTokens: hogTokens, Sampling: greedy(), Client: "hog"}
	}
	hog, err := e.Submit(ctx, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	// Every hog sequence has its first token: all slots are taken.
	first := map[int]bool{}
	var hogOut [8][]int32
	for len(first) < 8 {
		o, err := hog.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first[o.Seq] = true
		hogOut[o.Seq] = append(hogOut[o.Seq], o.Token)
	}
	// Stats are published after the step that pushed those tokens.
	for deadline := time.Now().Add(5 * time.Second); e.Stats().Running != 8 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if st := e.Stats(); st.Running != 8 {
		t.Fatalf("%d running, want the hog's 8", st.Running)
	}
	p := prompt(6, 2)
	steps0 := e.Stats().Steps
	other, err := e.Submit(ctx, Request{Prompt: p, MaxTokens: 4, Sampling: greedy(), Client: "other"})
	if err != nil {
		t.Fatal(err)
	}
	got, last := collect(t, other)
	if !slices.Equal(got, expected(p, 4)) {
		t.Fatalf("the other client's output %v, want %v", got, expected(p, 4))
	}
	// Its 4 tokens took a few steps (a step or two of admission, its prompt, 3 decodes), where
	// the hog has hundreds left: it was not made to wait for the hog.
	if steps := e.Stats().Steps - steps0; steps > 16 {
		t.Fatalf("the other client's 4 tokens took %d steps", steps)
	}
	hogDone := 0
	preempted := 0
	for {
		o, err := hog.Recv(ctx)
		if err != nil {
			break
		}
		if o.Done {
			hogDone++
			preempted += o.Usage.Preemptions
			if want := expected(hogPrompt, hogTokens); !slices.Equal(hogOut[o.Seq], want) {
				t.Errorf("hog sequence %d: %d tokens, not its greedy continuation", o.Seq, len(hogOut[o.Seq]))
			}
			continue
		}
		hogOut[o.Seq] = append(hogOut[o.Seq], o.Token)
	}
	if hogDone != 8 || preempted < 1 {
		t.Fatalf("%d hog sequences done, %d preempted; want 8 and at least 1", hogDone, preempted)
	}
	t.Logf("the other client: queue %v, first token %v; hog preemptions %d", last.Usage.QueueTime, last.Usage.TimeToFirstToken, preempted)
}
