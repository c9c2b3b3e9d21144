package engine

import (
	"context"
	"testing"
	"time"
)

// fittedModel is a cost model that is ready, with coefficients theta (seconds per unit of
// [1, decode tokens, prompt tokens, attended cells/cellScale]) and no error margin.
func fittedModel(theta [nFeat]float64) costModel {
	return costModel{theta: theta, steps: 2 * minFitSteps, withPrompt: minFitSteps, minP: 1, maxP: 2}
}

// TestAdmissionBound runs one admission round on an engine that is not started (a fake
// decoder, no model), with waiting requests, a cost model and observed lengths set by hand:
// how many requests join the running set, its bound and why admission stopped.
func TestAdmissionBound(t *testing.T) {
	const ms = 1e-3
	tests := []struct {
		name        string
		blocks      int // KV blocks of 16 cells
		maxRunning  int
		target      time.Duration
		model       costModel
		meanLen     float64 // observed mean length (0: none observed)
		nCtxSeq     int
		requests    int
		promptLen   int
		maxTokens   int
		wantRunning int
		wantBound   int
		wantStop    AdmitReason
	}{
		{name: "queue empty", blocks: 64, maxRunning: 8, requests: 3, promptLen: 8, maxTokens: 8,
			wantRunning: 3, wantBound: 8, wantStop: AdmitQueueEmpty},
		{name: "upper bound", blocks: 64, maxRunning: 4, requests: 6, promptLen: 8, maxTokens: 8,
			wantRunning: 4, wantBound: 4, wantStop: AdmitSlots},
		// 256 cells at a mean of 64 observed: 4 sequences, whatever -np allows.
		{name: "kv at the observed mean", blocks: 16, maxRunning: 16, meanLen: 64, requests: 6, promptLen: 8, maxTokens: 8,
			wantRunning: 4, wantBound: 4, wantStop: AdmitKV},
		// Nothing observed: the bound is -np, and with no max_tokens each request sets aside
		// growth to the 256-token cap, so 1024 cells hold 4 (llama-server's partition of
		// -c 1024 into 4 slots of 256).
		{name: "nothing observed: the sequence cap", blocks: 64, maxRunning: 16, nCtxSeq: 256, requests: 6, promptLen: 8,
			wantRunning: 4, wantBound: 16, wantStop: AdmitKV},
		// The bound allows 8 (128 cells at a mean of 16), but each request sets aside its
		// prompt and 100 tokens of growth: the blocks hold one.
		{name: "kv blocks", blocks: 8, maxRunning: 8, meanLen: 16, requests: 3, promptLen: 16, maxTokens: 100,
			wantRunning: 1, wantBound: 8, wantStop: AdmitKV},
		// 2 ms a step plus 1 ms a decode token under a 5 ms target, relaxed to 10 ms by a queue
		// twice the bound: 8 sequences.
		{name: "itl bound", blocks: 64, maxRunning: 16, target: 5 * time.Millisecond,
			model: fittedModel([nFeat]float64{2 * ms, 1 * ms, 0, 0}), meanLen: 16, requests: 32, promptLen: 8, maxTokens: 8,
			wantRunning: 8, wantBound: 8, wantStop: AdmitITL},
		// 8 waiting on a bound of 16 relax an 8 ms target to 12 ms: 10 sequences (6 without).
		{name: "a queue relaxes the target", blocks: 64, maxRunning: 16, target: 8 * time.Millisecond,
			model: fittedModel([nFeat]float64{2 * ms, 1 * ms, 0, 0}), meanLen: 16, requests: 8, promptLen: 8, maxTokens: 8,
			wantRunning: 8, wantBound: 10, wantStop: AdmitQueueEmpty},
		// Observed sequences are short (the bound is -np), but these prompts are 1024 tokens
		// and every 1024 attended cells cost 1 ms: with n decoding, 2 + 0.5n + n ms, within
		// the 10 ms target relaxed by 12 waiting to 17.5 ms for 10 of them.
		{name: "itl at the running lengths", blocks: 1024, maxRunning: 16, target: 10 * time.Millisecond,
			model: fittedModel([nFeat]float64{2 * ms, 0.5 * ms, 0, 1 * ms}), meanLen: 16, requests: 12, promptLen: 1024, maxTokens: 1,
			wantRunning: 10, wantBound: 16, wantStop: AdmitITL},
		// The decode step alone is past the target: one sequence still runs.
		{name: "one runs whatever the target", blocks: 64, maxRunning: 16, target: time.Millisecond,
			model: fittedModel([nFeat]float64{2 * ms, 1 * ms, 0, 0}), meanLen: 16, requests: 3, promptLen: 8, maxTokens: 8,
			wantRunning: 1, wantBound: 1, wantStop: AdmitITL},
		{name: "no target ignores the model", blocks: 64, maxRunning: 16,
			model: fittedModel([nFeat]float64{2 * ms, 1 * ms, 0, 0}), meanLen: 16, requests: 10, promptLen: 8, maxTokens: 8,
			wantRunning: 10, wantBound: 16, wantStop: AdmitQueueEmpty},
		{name: "model not fitted yet", blocks: 64, maxRunning: 16, target: 10 * time.Millisecond, meanLen: 16,
			requests: 10, promptLen: 8, maxTokens: 8, wantRunning: 10, wantBound: 16, wantStop: AdmitQueueEmpty},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lim := Limits{NCtx: tc.blocks * 16, NCtxSeq: tc.nCtxSeq, NSeqMax: tc.maxRunning, NBatch: 4096, Vocab: vocab}
			e, err := New(newFake(t, tc.blocks, 16, tc.maxRunning), lim,
				Config{MaxRunning: tc.maxRunning, BatchSize: 4096, TargetITL: tc.target, MaxQueue: 64})
			if err != nil {
				t.Fatal(err)
			}
			e.cost = tc.model
			if tc.meanLen > 0 {
				e.par.meanLen, e.par.lenN = tc.meanLen, 1
			}
			for i := range tc.requests {
				s, err := e.newSeq(context.Background(), Request{Prompt: prompt(tc.promptLen, int32(i)), MaxTokens: tc.maxTokens, Sampling: greedy()}, newStream(1), 0)
				if err != nil {
					t.Fatal(err)
				}
				e.waiting = append(e.waiting, s)
				e.queued.Add(1)
			}
			e.admit()
			if len(e.running) != tc.wantRunning || e.par.bound != tc.wantBound || e.par.stop != tc.wantStop {
				t.Fatalf("running %d, bound %d, stopped by %q; want %d, %d, %q",
					len(e.running), e.par.bound, e.par.stop, tc.wantRunning, tc.wantBound, tc.wantStop)
			}
			if len(e.running)+len(e.waiting) != tc.requests {
				t.Fatalf("%d running + %d waiting, want %d requests", len(e.running), len(e.waiting), tc.requests)
			}
		})
	}
}

// TestObservedLengthSetsTheBound: requests that ran to their end teach the engine their mean
// length, which then bounds the running set, as the step log and /metrics report it.
func TestObservedLengthSetsTheBound(t *testing.T) {
	rec := &stepRecorder{}
	// 32 blocks of 16 cells; -np 16.
	e := start(t, newFake(t, 32, 16, 16), Limits{NCtx: 512, NSeqMax: 16, NBatch: 256, Vocab: vocab},
		Config{MaxRunning: 16, BatchSize: 256, Observer: rec})
	// Four requests of 40 + 24 tokens: a mean of 64, so 512 cells hold 8.
	for i := range 4 {
		s, err := e.Submit(context.Background(), Request{Prompt: prompt(40, int32(i)), MaxTokens: 24, Sampling: greedy()})
		if err != nil {
			t.Fatal(err)
		}
		collect(t, s)
	}
	waitIdle(t, e)
	reqs := make([]Request, 12)
	for i := range reqs {
		reqs[i] = Request{Prompt: prompt(4, int32(10+i)), MaxTokens: 2, Sampling: greedy()}
	}
	s, err := e.Submit(context.Background(), reqs...)
	if err != nil {
		t.Fatal(err)
	}
	collect(t, s)
	waitIdle(t, e)
	steps := rec.snapshot()
	for _, st := range steps {
		if st.Running > st.Bound {
			t.Fatalf("step with %d running over its bound %d: %+v", st.Running, st.Bound, st)
		}
	}
	first := -1
	for i, st := range steps {
		if st.Waiting > 0 && st.AdmitStop == AdmitKV {
			first = i
			break
		}
	}
	if first < 0 || steps[first].Bound != 8 || steps[first].Running != 8 {
		t.Fatalf("no step with 8 running at a KV bound of 8 while the other 4 waited; steps: %+v", steps)
	}
	if st := e.Stats(); st.Bound < 1 || st.Bound > 16 {
		t.Fatalf("published bound %d outside [1, 16]", st.Bound)
	}
}
