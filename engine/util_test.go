package engine

import (
	"context"
	"math"
	"slices"
	"testing"
)

// runUtil starts an engine on a fake decoder with MaxRunning slots, a batch size of batchSize
// and no latency target, recording its steps.
func runUtil(t *testing.T, slots, batchSize int) (*Engine, *stepRecorder) {
	t.Helper()
	rec := &stepRecorder{}
	e := start(t, newFake(t, 512, 16, slots), Limits{NCtx: 8192, NSeqMax: slots, NBatch: 256, Vocab: vocab},
		Config{MaxRunning: slots, BatchSize: batchSize, Observer: rec})
	return e, rec
}

// utilSteps serves reqs, submitted together, to their end on runUtil(t, slots, batchSize) and
// returns the steps it observed.
func utilSteps(t *testing.T, slots, batchSize int, reqs ...Request) []StepInfo {
	t.Helper()
	e, rec := runUtil(t, slots, batchSize)
	s, err := e.Submit(context.Background(), reqs...)
	if err != nil {
		t.Fatal(err)
	}
	collect(t, s)
	waitIdle(t, e) // the last step is observed after its final outputs went out
	return rec.snapshot()
}

func utilIs(s StepInfo, want float64) bool { return math.Abs(s.Utilization()-want) < 1e-12 }

// TestUtilizationAllSlotsDecoding: 16 requests submitted together on MaxRunning 16 are admitted
// in one step and decode together with nothing waiting: every step, the prompts' one and the
// 19 decode steps, carries all it could, and a decode step's capacity is the 16 slots, not the
// 256-token budget (tokens over the budget read 0.0625 here).
func TestUtilizationAllSlotsDecoding(t *testing.T) {
	reqs := make([]Request, 16)
	for i := range reqs {
		reqs[i] = Request{Prompt: prompt(3, int32(i)), MaxTokens: 20, Sampling: greedy()}
	}
	steps := utilSteps(t, 16, 256, reqs...)
	if len(steps) != 20 {
		t.Fatalf("%d steps, want 20 (one for the prompts, 19 decoding): %+v", len(steps), steps)
	}
	for i, st := range steps {
		if !utilIs(st, 1) {
			t.Errorf("step %d (%d decode + %d prompt tokens, capacity %d, budget %d, waiting %d): utilization %v, want 1",
				i, st.DecodeTokens, st.PrefillTokens, st.Capacity, st.Budget, st.Waiting, st.Utilization())
		}
		if i > 0 && (st.DecodeTokens != 16 || st.Capacity != 16) {
			t.Errorf("decode step %d: %d decode tokens, capacity %d; want 16 and 16", i, st.DecodeTokens, st.Capacity)
		}
	}
}

// TestUtilizationOneClient: one sequence decoding alone on 16 slots reads 1/16 every step;
// its prompt's step reads its 3 tokens over those 3 and the 15 free slots.
func TestUtilizationOneClient(t *testing.T) {
	steps := utilSteps(t, 16, 256, Request{Prompt: prompt(3, 1), MaxTokens: 10, Sampling: greedy()})
	if len(steps) != 10 {
		t.Fatalf("%d steps, want 10: %+v", len(steps), steps)
	}
	if st := steps[0]; st.PrefillTokens != 3 || st.Capacity != 18 {
		t.Errorf("prompt step: %d prompt tokens, capacity %d; want 3 and 18", st.PrefillTokens, st.Capacity)
	}
	for i, st := range steps[1:] {
		if st.DecodeTokens != 1 || st.Capacity != 16 || !utilIs(st, 1.0/16) {
			t.Errorf("decode step %d: %d decode tokens, capacity %d, utilization %v; want 1, 16, 1/16",
				i+1, st.DecodeTokens, st.Capacity, st.Utilization())
		}
	}
}

// TestUtilizationBudgetLimited: a 200-token prompt computed beside a decoding sequence under a
// 32-token budget (4 slots, no target): while more prompt waits than the budget leaves room
// for, the capacity is the budget and utilization tokens/budget; the prompt's last chunk is
// limited by the work (1 decode + 14 prompt tokens + 2 free slots); decode alone reads 1/4.
func TestUtilizationBudgetLimited(t *testing.T) {
	e, rec := runUtil(t, 4, 32)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dec, err := e.Submit(ctx, Request{Prompt: prompt(3, 1), MaxTokens: 5000, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := dec.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	long, err := e.Submit(ctx, Request{Prompt: prompt(200, 7), MaxTokens: 1, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, long)
	dec.Cancel(FinishCancelled)
	collect(t, dec)
	waitIdle(t, e)
	var chunks, decodeOnly []StepInfo
	for _, st := range rec.snapshot() {
		switch {
		case st.DecodeTokens == 1 && st.PrefillTokens > 0:
			chunks = append(chunks, st)
		case st.DecodeTokens == 1:
			decodeOnly = append(decodeOnly, st)
		}
	}
	if len(chunks) != 7 || len(decodeOnly) < 2 {
		t.Fatalf("%d steps with a chunk beside the decoder (want 7: 6×31 + 14), %d decode-only (want >= 2)",
			len(chunks), len(decodeOnly))
	}
	for i, st := range chunks[:6] {
		if st.Tokens != 32 || st.Budget != 32 || st.Capacity != st.Budget || !utilIs(st, float64(st.Tokens)/float64(st.Budget)) {
			t.Errorf("chunk %d: %d tokens, budget %d, capacity %d, utilization %v; want capacity = budget = 32, tokens/budget",
				i, st.Tokens, st.Budget, st.Capacity, st.Utilization())
		}
	}
	if last := chunks[6]; last.Tokens != 15 || last.Capacity != 17 {
		t.Errorf("last chunk: %d tokens, capacity %d; want 15 and 17", last.Tokens, last.Capacity)
	}
	if i := slices.IndexFunc(decodeOnly, func(st StepInfo) bool { return st.Capacity != 4 || !utilIs(st, 0.25) }); i >= 0 {
		t.Errorf("decode-only step %+v: want capacity 4, utilization 1/4", decodeOnly[i])
	}
}
