package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ubatch/batch"
	"ubatch/kvcache"
)

var (
	stressSeed = flag.Uint64("stress.seed", 0, "base seed of TestStress rounds (0: time-based)")
	stressTime = flag.Duration("stress.time", 0, "how long TestStress runs (0: 1.5s, 300ms with -short)")
)

// stressDeadline is how long a stream may take to finish before TestStress declares the engine
// stuck and dumps its state. Rounds are tiny, so a healthy engine needs far less even under -race
// on a loaded machine.
const stressDeadline = 20 * time.Second

var errInjected = errors.New("injected decode failure")

// stressDecoder is the fake model of TestStress: the greedy successor function next, real KV
// reservations, optional random delays and yields (to shake goroutine interleavings) and
// injected failures. Decode runs on the engine goroutine only, so rng needs no lock.
type stressDecoder struct {
	cfg    kvcache.Config
	nSeq   int
	rng    *rand.Rand
	delayP float64 // chance of a yield or short sleep per Decode
	failP  float64 // chance that Decode fails (the engine must then forget the step's cells)
	logits [][]float32
	cells  []int32
	calls  atomic.Int64
	empty  atomic.Int64 // Decode calls with an empty batch (a scheduler bug)
}

func (d *stressDecoder) KVConfig() kvcache.Config { return d.cfg }

func (d *stressDecoder) Decode(b *batch.Batch) error {
	d.calls.Add(1)
	if b.Len() == 0 {
		d.empty.Add(1)
	}
	if err := checkSchedule(b, d.nSeq); err != nil {
		return err
	}
	if d.rng.Float64() < d.failP {
		return errInjected
	}
	d.cells = append(d.cells[:0], b.KV.Slots...)
	for len(d.logits) < b.Len() {
		d.logits = append(d.logits, make([]float32, vocab))
	}
	for i := range b.Len() {
		clear(d.logits[i])
		d.logits[i][next(b.Tokens[i], b.Pos[i])] = 10
	}
	if d.rng.Float64() < d.delayP {
		if d.rng.IntN(2) == 0 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Duration(d.rng.IntN(300)) * time.Microsecond)
		}
	}
	return nil
}

func (d *stressDecoder) Logits(i int) []float32 { return d.logits[i] }

// stressObserver keeps the latest scheduler events for a dump, counts them by kind, and checks
// per-step invariants.
type stressObserver struct {
	maxRunning int

	mu         sync.Mutex
	events     []string // ring of the latest events
	at         int
	counts     map[string]int // "finished", each finish reason, "preempted", "queue full"
	violations []string
}

func (o *stressObserver) note(ev string, kinds ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range kinds {
		o.counts[k]++
	}
	if len(o.events) < 64 {
		o.events = append(o.events, ev)
	} else {
		o.events[o.at] = ev
		o.at = (o.at + 1) % len(o.events)
	}
}

func (o *stressObserver) Step(s StepInfo) {
	o.note(fmt.Sprintf("step %+v", s))
	if s.Tokens <= 0 || s.Tokens > s.Budget || s.Running > o.maxRunning || s.KVUsed+s.KVCached > s.KVTotal {
		o.mu.Lock()
		o.violations = append(o.violations, fmt.Sprintf("bad step %+v (max running %d)", s, o.maxRunning))
		o.mu.Unlock()
	}
}

func (o *stressObserver) Admitted(wait time.Duration, prompt, cached int) {
	o.note(fmt.Sprintf("admitted prompt=%d cached=%d", prompt, cached))
}

func (o *stressObserver) Token(bool, time.Duration) {}

func (o *stressObserver) Lookup(int, int) {}

func (o *stressObserver) Finished(r FinishReason, u Usage) {
	o.note(fmt.Sprintf("finished %s prompt=%d completion=%d", r, u.PromptTokens, u.CompletionTokens), "finished", string(r))
}

func (o *stressObserver) Preempted() { o.note("preempted", "preempted") }
func (o *stressObserver) Rejected()  { o.note("rejected", "queue full") }

func (o *stressObserver) dump() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var sb strings.Builder
	for i := range o.events {
		fmt.Fprintf(&sb, "  %s\n", o.events[(o.at+i)%len(o.events)])
	}
	return sb.String()
}

// stressRound is one randomly drawn engine configuration and workload.
type stressRound struct {
	seed                       uint64
	blockSize, blocks, nSeq    int
	nCtx                       int
	cfg                        Config
	eog                        int32 // end-of-generation token, -1 for none
	delayP, failP              float64
	clients, perClient         int
	shutdown                   bool // cancel Run while clients are still submitting
	shared                     []int32
	maxTokens, cancelPct, slow int
}

func drawRound(seed uint64) stressRound {
	rng := rand.New(rand.NewPCG(seed, 0x57e55))
	r := stressRound{seed: seed, blockSize: []int{1, 2, 4, 8}[rng.IntN(4)], nSeq: 1 + rng.IntN(8)}
	r.blocks = max(2, (8+rng.IntN(64))/r.blockSize)
	r.nCtx = max(2, r.blocks*r.blockSize-rng.IntN(r.blockSize))
	r.cfg = Config{
		BatchSize:  1 + rng.IntN(32),
		ChunkSize:  1 + rng.IntN(16),
		MaxRunning: rng.IntN(r.nSeq + 1),
		MaxQueue:   1 + rng.IntN(24),
		Policy:     []Policy{FCFS, SJF}[rng.IntN(2)],
	}
	r.eog = -1
	if rng.IntN(3) == 0 {
		r.eog = int32(rng.IntN(vocab))
	}
	r.delayP = []float64{0, 0.1, 0.5}[rng.IntN(3)]
	if rng.IntN(6) == 0 {
		r.failP = 0.02
	}
	r.clients, r.perClient = 1+rng.IntN(8), 1+rng.IntN(6)
	r.shutdown = rng.IntN(6) == 0
	r.shared = make([]int32, rng.IntN(3*r.blockSize+2))
	for i := range r.shared {
		r.shared[i] = int32(rng.IntN(vocab))
	}
	r.maxTokens, r.cancelPct, r.slow = 1+rng.IntN(24), rng.IntN(40), rng.IntN(3)
	return r
}

// stressReq is one client request of a round and what its client saw.
type stressReq struct {
	req      Request
	cancelAt int          // cancel after this many tokens (-1: never)
	how      int          // 0: cancel the context, 1: Stream.Cancel(FinishStop)
	got      []int32      // tokens received
	last     Output       // the final output
	lastSeen atomic.Int64 // unix nanos of the latest output, for the dump
	state    atomic.Pointer[string]
}

func (q *stressReq) String() string {
	st := "?"
	if p := q.state.Load(); p != nil {
		st = *p
	}
	return fmt.Sprintf("prompt=%d max=%d prio=%d ignored=%v cancelAt=%d how=%d state=%s idle=%v",
		len(q.req.Prompt), q.req.MaxTokens, q.req.Priority, q.req.Sampling.IgnoreTokens, q.cancelAt, q.how, st,
		time.Since(time.Unix(0, q.lastSeen.Load())).Round(time.Millisecond))
}

func (q *stressReq) set(s string) { q.state.Store(&s) }

// outcome is what the fake model must produce for req when nothing interferes: the streamed
// tokens, the finish reason and the completion count (which includes a final EOG token).
func outcome(req Request, eog int32, nCtx int) ([]int32, FinishReason, int) {
	var toks []int32
	tok, pos := req.Prompt[len(req.Prompt)-1], int32(len(req.Prompt)-1)
	for i := 1; ; i++ {
		tok, pos = next(tok, pos), pos+1
		if tok == eog && slices.Contains(req.Sampling.IgnoreTokens, eog) {
			tok = 1 - min(eog, 1) // ignore_eos: greedy takes the lowest other id (the fake's other logits are 0)
		} else if tok == eog {
			return toks, FinishStop, i
		}
		toks = append(toks, tok)
		if req.MaxTokens > 0 && i >= req.MaxTokens || len(req.Prompt)+i >= nCtx {
			return toks, FinishLength, i
		}
	}
}

// TestStress runs rounds of random engine configurations (tiny KV pools, budgets and chunks,
// both policies, random priorities, shared prefixes, EOG tokens, injected decode failures and
// delays) under concurrent clients that cancel at random points, read slowly, or race a shutdown.
// Every stream must finish within stressDeadline with the fake model's exact greedy output (or a
// prefix of it when cancelled), usage must add up, and the engine must return to idle with no KV
// block, queue slot or sequence id leaked. A stuck stream fails with a dump of the round.
func TestStress(t *testing.T) {
	budget := *stressTime
	if budget == 0 {
		budget = 1500 * time.Millisecond
		if testing.Short() {
			budget = 300 * time.Millisecond
		}
	}
	base := *stressSeed
	if base == 0 {
		base = uint64(time.Now().UnixNano())
	}
	t.Logf("base seed %d (rerun a round's configuration with -stress.seed)", base)
	end := time.Now().Add(budget)
	rounds, tally := 0, map[string]int{}
	for ; rounds == 0 || time.Now().Before(end); rounds++ {
		r := drawRound(base + uint64(rounds))
		if !runRound(t, r, tally) {
			t.Fatalf("round %d failed: rerun its configuration with -stress.seed=%d", rounds, r.seed)
		}
	}
	t.Logf("%d rounds: %v", rounds, tally)
	// Guard the workload itself: with this many rounds, each situation below is all but certain.
	if rounds >= 30 {
		for _, what := range []string{"preempted", "queue full", string(FinishLength), string(FinishStop), string(FinishCancelled)} {
			if tally[what] == 0 {
				t.Errorf("%d rounds never saw %q: the stress no longer exercises it", rounds, what)
			}
		}
	}
}

// runRound runs one round and reports whether it passed.
func runRound(t *testing.T, r stressRound, tally map[string]int) bool {
	t.Helper()
	dec := &stressDecoder{cfg: fakeKV(r.blocks, r.blockSize, r.nSeq), nSeq: r.nSeq, rng: rand.New(rand.NewPCG(r.seed, 1)), delayP: r.delayP, failP: r.failP}
	obs := &stressObserver{counts: map[string]int{}}
	cfg := r.cfg
	cfg.Observer = obs
	if r.eog >= 0 {
		cfg.IsEOG = func(tok int32) bool { return tok == r.eog }
	}
	e, err := New(dec, Limits{NCtx: r.nCtx, NSeqMax: r.nSeq, NBatch: 64, Vocab: vocab}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	obs.maxRunning = e.Config().MaxRunning // before Run: nothing calls obs yet
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go e.Run(ctx)

	rng := rand.New(rand.NewPCG(r.seed, 2))
	var reqs []*stressReq
	for range r.clients * r.perClient {
		n := 1 + rng.IntN(min(r.nCtx-1, 3*r.blockSize+6))
		p := make([]int32, 0, n)
		if rng.IntN(2) == 0 {
			p = append(p, r.shared[:min(len(r.shared), n)]...)
		}
		for len(p) < n {
			p = append(p, int32(rng.IntN(vocab)))
		}
		q := &stressReq{req: Request{Prompt: p, Sampling: greedy(), Priority: Priority(rng.IntN(3) - 1),
			MaxTokens: rng.IntN(r.maxTokens + 1)}, cancelAt: -1}
		if r.eog >= 0 && rng.IntN(3) == 0 { // ignore_eos
			q.req.Sampling.IgnoreTokens = []int32{r.eog}
		}
		if rng.IntN(4) == 0 {
			q.req.Logprobs, q.req.TopLogprobs = true, rng.IntN(4)
		}
		if rng.IntN(100) < r.cancelPct {
			q.cancelAt, q.how = rng.IntN(4), rng.IntN(2)
		}
		q.set("new")
		reqs = append(reqs, q)
	}

	rs := &roundState{r: r, e: e}
	var wg sync.WaitGroup
	for c := range r.clients {
		delays := rand.New(rand.NewPCG(r.seed, uint64(3+c)))
		wg.Go(func() {
			for _, q := range reqs[c*r.perClient : (c+1)*r.perClient] {
				if delays.IntN(3) == 0 {
					time.Sleep(time.Duration(delays.IntN(200)) * time.Microsecond)
				}
				rs.run(q, delays)
			}
		})
	}
	if r.shutdown {
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
		stop()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(stressDeadline):
		t.Errorf("round %+v: a stream did not finish within %v\n%s", r, stressDeadline, stressDump(e, dec, obs, reqs))
		stop() // shutdown finishes every outstanding stream, so the clients end
		<-finished
		return false
	}
	for _, f := range rs.fails {
		t.Errorf("round %+v: %s", r, f)
	}
	// Every stream has finished, so the engine must go idle, having generated exactly the
	// tokens the final usages count (the snapshot is published just after the step that
	// finished the last stream, so poll).
	if !r.shutdown && !waitIdleFor(e, uint64(rs.generated.Load()), stressDeadline) {
		t.Errorf("round %+v: engine not idle, or its token count %d differs from the usages' %d, after every stream finished\n%s",
			r, e.Stats().Generated, rs.generated.Load(), stressDump(e, dec, obs, reqs))
		return false
	}
	stop()
	<-e.Done()
	// Run has returned: its state is ours to read.
	if len(e.running) != 0 || len(e.waiting) != 0 || len(e.incoming) != 0 || e.queued.Load() != 0 || e.kv.Stats().Used != 0 {
		t.Errorf("round %+v: after shutdown %d running, %d waiting, %d incoming, queue counter %d, KV %+v",
			r, len(e.running), len(e.waiting), len(e.incoming), e.queued.Load(), e.kv.Stats())
	}
	ids := map[int32]bool{}
	for _, id := range e.freeIDs {
		ids[id] = true
	}
	if len(ids) != r.nSeq || len(e.freeIDs) != r.nSeq {
		t.Errorf("round %+v: free sequence ids %v, want each of [0, %d) once", r, e.freeIDs, r.nSeq)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, v := range obs.violations {
		t.Errorf("round %+v: %s", r, v)
	}
	if n := dec.empty.Load(); n > 0 {
		t.Errorf("round %+v: %d empty batches decoded", r, n)
	}
	if obs.counts["finished"] != int(rs.submitted.Load()) || obs.counts["queue full"] != int(rs.full.Load()) {
		t.Errorf("round %+v: observer counts %v; clients had %d requests accepted and %d refused as full",
			r, obs.counts, rs.submitted.Load(), rs.full.Load())
	}
	for k, n := range obs.counts {
		tally[k] += n
	}
	return !t.Failed()
}

// roundState is what the clients of a round share.
type roundState struct {
	r         stressRound
	e         *Engine
	generated atomic.Int64 // completion tokens of the final outputs
	submitted atomic.Int64
	full      atomic.Int64 // Submits refused with ErrQueueFull
	mu        sync.Mutex
	fails     []string
}

func (rs *roundState) fail(format string, args ...any) {
	rs.mu.Lock()
	rs.fails = append(rs.fails, fmt.Sprintf(format, args...))
	rs.mu.Unlock()
}

// run submits q, reads its stream to the end (cancelling or pausing as q says) and checks what
// it got.
func (rs *roundState) run(q *stressReq, rng *rand.Rand) {
	r, fail := rs.r, rs.fail
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q.lastSeen.Store(time.Now().UnixNano())
	s, err := rs.e.Submit(ctx, q.req)
	switch {
	case errors.Is(err, ErrQueueFull):
		rs.full.Add(1)
		q.set("queue full")
		return
	case errors.Is(err, ErrClosed) && r.shutdown:
		q.set("closed")
		return
	case err != nil:
		fail("submit %v: %v", q, err)
		q.set("submit failed")
		return
	}
	rs.submitted.Add(1)
	q.set("reading")
	cancelled := false
	rctx, rcancel := context.WithTimeout(context.Background(), 2*stressDeadline)
	defer rcancel()
	for {
		if len(q.got) == q.cancelAt && !cancelled {
			cancelled = true
			if q.how == 0 {
				cancel()
			} else {
				s.Cancel(FinishStop)
			}
		}
		if r.slow > 0 && rng.IntN(4) == 0 {
			time.Sleep(time.Duration(rng.IntN(100*r.slow)) * time.Microsecond)
		}
		o, err := s.Recv(rctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fail("recv %v: %v", q, err)
			q.set("recv failed")
			return
		}
		q.lastSeen.Store(time.Now().UnixNano())
		if o.Done {
			if q.last.Done {
				fail("%v: a second final output %+v", q, o)
			}
			q.last = o
			continue
		}
		if q.last.Done {
			fail("%v: token %d after the final output", q, o.Token)
		}
		if q.req.Logprobs && len(o.Top) != q.req.TopLogprobs {
			fail("%v: %d top logprobs, want %d", q, len(o.Top), q.req.TopLogprobs)
		}
		q.got = append(q.got, o.Token)
	}
	q.set("done")
	rs.check(q, cancelled)
}

// check compares a finished request with the fake model's greedy output.
func (rs *roundState) check(q *stressReq, cancelled bool) {
	r, fail, o := rs.r, rs.fail, q.last
	if !o.Done {
		fail("%v: stream ended without a final output", q)
		return
	}
	rs.generated.Add(int64(o.Usage.CompletionTokens))
	want, finish, completion := outcome(q.req, r.eog, r.nCtx)
	if len(q.got) > len(want) || !slices.Equal(q.got, want[:len(q.got)]) {
		fail("%v: tokens %v are not a prefix of the greedy output %v", q, q.got, want)
	}
	if o.Usage.PromptTokens != len(q.req.Prompt) {
		fail("%v: usage %+v, prompt has %d tokens", q, o.Usage, len(q.req.Prompt))
	}
	switch {
	case o.Finish == FinishError && (errors.Is(o.Err, ErrClosed) && r.shutdown || errors.Is(o.Err, errInjected)):
	case cancelled && o.Usage.CompletionTokens == len(q.got) &&
		(q.how == 0 && o.Finish == FinishCancelled || q.how == 1 && o.Finish == FinishStop):
		return // the cancellation took effect after any number of further tokens
	case o.Finish == finish:
		if !slices.Equal(q.got, want) || o.Usage.CompletionTokens != completion {
			fail("%v: finished %s with %d tokens (usage %d), want %d tokens (usage %d)",
				q, o.Finish, len(q.got), o.Usage.CompletionTokens, len(want), completion)
		}
		return
	default:
		fail("%v: finish %s (err %v) after %d tokens (usage %d), want %s after %d",
			q, o.Finish, o.Err, len(q.got), o.Usage.CompletionTokens, finish, len(want))
		return
	}
	// Failed: every generated token was streamed (only a final EOG token is not).
	if o.Usage.CompletionTokens != len(q.got) {
		fail("%v: usage counts %d completion tokens, %d were streamed", q, o.Usage.CompletionTokens, len(q.got))
	}
}

// waitIdleFor waits until no sequence runs, waits or holds KV blocks and the engine has generated
// the given number of tokens.
func waitIdleFor(e *Engine, generated uint64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if st := e.Stats(); st.Running == 0 && st.Waiting == 0 && st.KV.Used == 0 && st.Generated == generated {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// stressDump describes a stuck round: published stats, decoder calls, the latest scheduler events,
// every unfinished request and the goroutine stacks (the engine goroutine's shows where Run is).
func stressDump(e *Engine, dec *stressDecoder, obs *stressObserver, reqs []*stressReq) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "stats %+v\ndecode calls %d (empty %d), queue counter %d, incoming %d\nlatest events:\n%s",
		e.Stats(), dec.calls.Load(), dec.empty.Load(), e.queued.Load(), len(e.incoming), obs.dump())
	sb.WriteString("unfinished requests:\n")
	for i, q := range reqs {
		if p := q.state.Load(); p != nil && *p == "reading" {
			fmt.Fprintf(&sb, "  #%d %v\n", i, q)
		}
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	fmt.Fprintf(&sb, "goroutines:\n%s", buf)
	return sb.String()
}
