package engine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ubatch/internal/testkit"
	"ubatch/sample"
)

// panicCounter is an Observer that counts recovered panics (PanicObserver) and nothing else.
type panicCounter struct {
	stepRecorder
	n atomic.Int64
}

func (p *panicCounter) Panicked() { p.n.Add(1) }

var _ PanicObserver = (*panicCounter)(nil)

// startHooked is start with the test hook and clock set before Run.
func startHooked(t *testing.T, d Decoder, lim Limits, cfg Config, hook func(string, *Request), now func() time.Time) *Engine {
	t.Helper()
	e, err := New(d, lim, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.testHook = hook
	if now != nil {
		e.now = now
	}
	run(t, e)
	return e
}

// boom is what the faulty sampler panics with; the test finds its frame in the logged stack.
func boom() { panic("index out of range [7] with length 7") }

// TestSamplePanicFailsOneRequest: a panic in one sequence's sampling (the hook stands for a
// broken grammar) ends that request alone, with a *PanicError whose ID is in the error text and
// in the error log beside the panicking frame; it is counted; a request decoding beside it and
// one submitted after it are served in full; the failed one's blocks are freed.
func TestSamplePanicFailsOneRequest(t *testing.T) {
	const faulty = 666 // the seed that marks the faulty request
	samples := 0       // of the faulty request: the hook runs on the engine's goroutine only
	hook := func(where string, r *Request) {
		if where == "sample" && r.Sampling.Seed == faulty {
			if samples++; samples == 3 {
				boom()
			}
		}
	}
	var logs testkit.SyncBuffer
	obs := &panicCounter{}
	d := newFake(t, 64, 4, 4)
	d.delay = 200 * time.Microsecond // keep the two requests decoding side by side
	e := startHooked(t, d, Limits{NCtx: 256, NSeqMax: 4, NBatch: 64, Vocab: vocab},
		Config{Observer: obs, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, hook, nil)

	plainPrompt := prompt(5, 1)
	plain, err := e.Submit(context.Background(), Request{Prompt: plainPrompt, MaxTokens: 30, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	bad := greedy()
	bad.Seed = faulty
	faultyPrompt := prompt(4, 2)
	failing, err := e.Submit(context.Background(), Request{Prompt: faultyPrompt, MaxTokens: 30, Sampling: bad})
	if err != nil {
		t.Fatal(err)
	}
	got, last := collect(t, failing)
	var pe *PanicError
	if last.Finish != FinishError || !errors.As(last.Err, &pe) {
		t.Fatalf("faulty request ended %s, %v; want FinishError with a *PanicError", last.Finish, last.Err)
	}
	if want := "internal error " + pe.ID + ": please report it"; pe.ID == "" || last.Err.Error() != want || pe.Where != "sample" {
		t.Fatalf("error %q (where %q), want %q", last.Err, pe.Where, want)
	}
	if want := expected(faultyPrompt, 2); !slices.Equal(got, want) {
		t.Fatalf("faulty request streamed %v before its panic, want %v", got, want)
	}
	if n := obs.n.Load(); n != 1 {
		t.Fatalf("%d panics counted, want 1", n)
	}
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "error_id="+pe.ID) ||
		!strings.Contains(out, "engine.boom") {
		t.Fatalf("the log lacks the error record with the ID and the panicking frame:\n%s", out)
	}

	got, last = collect(t, plain)
	if want := expected(plainPrompt, 30); !slices.Equal(got, want) || last.Finish != FinishLength {
		t.Fatalf("the request beside it: %v (%s %v), want %v", got, last.Finish, last.Err, want)
	}
	after, err := e.Submit(context.Background(), Request{Prompt: prompt(3, 3), MaxTokens: 5, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	if got, last := collect(t, after); !slices.Equal(got, expected(prompt(3, 3), 5)) || last.Finish != FinishLength {
		t.Fatalf("a request after the panic: %v (%s %v)", got, last.Finish, last.Err)
	}
	waitIdle(t, e) // the failed request's blocks went back
}

// TestSubmitPanicIsAnError: a panic while making a request's sampler (a grammar whose matcher
// cannot start, say) is Submit's *PanicError, counted, and the engine serves on.
func TestSubmitPanicIsAnError(t *testing.T) {
	hook := func(where string, r *Request) {
		if where == "submit" && r.Sampling.Seed == 13 {
			boom()
		}
	}
	obs := &panicCounter{}
	d := newFake(t, 64, 4, 4)
	e := startHooked(t, d, Limits{NCtx: 256, NSeqMax: 4, NBatch: 64, Vocab: vocab},
		Config{Observer: obs, Logger: slog.New(slog.NewTextHandler(&testkit.SyncBuffer{}, nil))}, hook, nil)
	bad := greedy()
	bad.Seed = 13
	_, err := e.Submit(context.Background(), Request{Prompt: prompt(3, 1), Sampling: bad})
	var pe *PanicError
	if !errors.As(err, &pe) || pe.Where != "submit" || obs.n.Load() != 1 {
		t.Fatalf("Submit = %v (counted %d); want a *PanicError from submit, counted once", err, obs.n.Load())
	}
	s, err := e.Submit(context.Background(), Request{Prompt: prompt(3, 1), MaxTokens: 4, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := collect(t, s); !slices.Equal(got, expected(prompt(3, 1), 4)) {
		t.Fatalf("the next request got %v", got)
	}
}

// TestSlowSamplingEndsTheSequence: on a fake clock, one request's every Sample takes 20 ms
// against a 10 ms bound; it is ended after one window (its first sample is not charged) with a
// *sample.RequestError wrapping ErrSamplingTooSlow, while a request sampling in 1 ms, and one
// whose single sample takes 50 ms (a grammar state met once), are served to their end.
func TestSlowSamplingEndsTheSequence(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	costs := map[uint64]func(n int) time.Duration{
		1: func(int) time.Duration { return 20 * time.Millisecond }, // expensive at every token
		2: func(int) time.Duration { return time.Millisecond },      // plain
		3: func(n int) time.Duration { // one slow token
			if n == 4 {
				return 50 * time.Millisecond
			}
			return 0
		},
	}
	calls := map[uint64]int{} // the hook runs on the engine's goroutine only
	hook := func(where string, r *Request) {
		if cost := costs[r.Sampling.Seed]; where == "sample" && cost != nil {
			calls[r.Sampling.Seed]++
			clock.advance(cost(calls[r.Sampling.Seed]))
		}
	}
	d := newFake(t, 64, 4, 4)
	e := startHooked(t, d, Limits{NCtx: 256, NSeqMax: 4, NBatch: 64, Vocab: vocab},
		Config{MaxSampleTime: 10 * time.Millisecond}, hook, clock.Now)
	streams := map[uint64]*Stream{}
	prompts := map[uint64][]int32{}
	for seed := range uint64(3) {
		p := greedy()
		p.Seed = seed + 1
		prompts[p.Seed] = prompt(4, int32(seed))
		s, err := e.Submit(context.Background(), Request{Prompt: prompts[p.Seed], MaxTokens: 40, Sampling: p})
		if err != nil {
			t.Fatal(err)
		}
		streams[p.Seed] = s
	}
	got, last := collect(t, streams[1])
	var re *sample.RequestError
	if last.Finish != FinishError || !errors.As(last.Err, &re) || !errors.Is(last.Err, ErrSamplingTooSlow) ||
		re.Code != sample.CodeGrammarTooExpensive {
		t.Fatalf("the expensive request ended %s, %v; want a RequestError wrapping ErrSamplingTooSlow", last.Finish, last.Err)
	}
	// The uncharged first sample and 7 of the window's 8 were streamed; the 8th ended it.
	if len(got) != sampleWindow {
		t.Fatalf("the expensive request streamed %d tokens, want %d", len(got), sampleWindow)
	}
	for _, seed := range []uint64{2, 3} {
		got, last := collect(t, streams[seed])
		if want := expected(prompts[seed], 40); !slices.Equal(got, want) || last.Finish != FinishLength {
			t.Fatalf("request %d: %d tokens, %s %v; want all 40", seed, len(got), last.Finish, last.Err)
		}
	}
}

// TestSampleBoundDefaults: the bound follows the inter-token target, with a floor, and is off
// when negative.
func TestSampleBoundDefaults(t *testing.T) {
	for _, tc := range []struct{ target, set, want time.Duration }{
		{0, 0, 50 * time.Millisecond},
		{40 * time.Millisecond, 0, 20 * time.Millisecond},
		{4 * time.Millisecond, 0, 5 * time.Millisecond},
		{40 * time.Millisecond, 3 * time.Millisecond, 3 * time.Millisecond},
		{0, -1, -1},
	} {
		e, err := New(newFake(t, 8, 4, 1), Limits{NCtx: 32, NSeqMax: 1, NBatch: 8, Vocab: vocab},
			Config{TargetITL: tc.target, MaxSampleTime: tc.set})
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Config().MaxSampleTime; got != tc.want {
			t.Errorf("target %v, MaxSampleTime %v: effective %v, want %v", tc.target, tc.set, got, tc.want)
		}
	}
	// With no bound, slow sampling is never charged.
	e, _ := New(newFake(t, 8, 4, 1), Limits{NCtx: 32, NSeqMax: 1, NBatch: 8, Vocab: vocab}, Config{MaxSampleTime: -1})
	s := &sequence{}
	for range 3 * sampleWindow {
		if err := e.chargeSample(s, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
}

// emitBench is one sequence ready to emit tokens forever from a fixed logits row: round emits one
// and drops it, as a reader would take it.
func emitBench(t testing.TB) (s *sequence, round func()) {
	e, err := New(&fakeDecoder{cfg: fakeKV(8, 4, 1)}, Limits{NCtx: 1 << 20, NSeqMax: 1, NBatch: 8, Vocab: vocab}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	smp, err := sample.New(sample.DefaultParams(), vocab)
	if err != nil {
		t.Fatal(err)
	}
	st := newStream(1)
	s = &sequence{kvSeq: 0, ctx: context.Background(), stream: st, sampler: smp, tokens: make([]int32, 1, 64),
		req: Request{Sampling: sample.DefaultParams()}, lastToken: time.Now()}
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(i % 7)
	}
	return s, func() {
		e.emitGuarded(s, logits)
		st.buf = st.buf[:0]     // the reader took it
		s.tokens = s.tokens[:1] // the history does not grow without bound
	}
}

// TestEmitAllocatesNothing: the per-token path (panic guard, sampling time account, sampling,
// streaming) allocates nothing once the stream's buffer has grown.
func TestEmitAllocatesNothing(t *testing.T) {
	s, round := emitBench(t)
	for range 2 * sampleWindow {
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("emit allocates %v times per token", n)
	}
	if s.done {
		t.Fatal("the sequence ended")
	}
}

// BenchmarkEmit is the per-token cost of emit beside the sampler's own (a 64-token vocabulary).
func BenchmarkEmit(b *testing.B) {
	_, round := emitBench(b)
	b.ReportAllocs()
	for b.Loop() {
		round()
	}
}
