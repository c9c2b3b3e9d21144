package engine

import (
	"context"
	"testing"
	"time"
)

// TestTimingUsageOnEngineClock: a request's PromptTime is the model time of its prompt chunks'
// steps and its GenerationTime that of the steps between its first and last sampled tokens, as
// the engine's clock says (the fake one moves only inside Decode, by each batch's cost), however
// late the reader takes the stream.
func TestTimingUsageOnEngineClock(t *testing.T) {
	tests := []struct {
		name                       string
		promptLen, batch, maxToken int
		promptSteps                int
	}{
		{name: "one chunk", promptLen: 6, batch: 64, maxToken: 4, promptSteps: 1},
		{name: "three chunks", promptLen: 10, batch: 4, maxToken: 5, promptSteps: 3},
		{name: "one token", promptLen: 5, batch: 2, maxToken: 1, promptSteps: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &timedDecoder{fakeDecoder: newFake(t, 64, 4, 2), clock: &fakeClock{now: time.Unix(1000, 0)}}
			e := startHooked(t, d, Limits{NCtx: 256, NSeqMax: 2, NBatch: 64, Vocab: vocab},
				Config{BatchSize: tc.batch}, nil, d.clock.Now)
			st, err := e.Submit(context.Background(), Request{Prompt: prompt(tc.promptLen, 3), MaxTokens: tc.maxToken, Sampling: greedy()})
			if err != nil {
				t.Fatal(err)
			}
			got, last := collect(t, st)
			if len(got) != tc.maxToken {
				t.Fatalf("%d tokens, want %d", len(got), tc.maxToken)
			}
			d.mu.Lock()
			cost := append([]time.Duration(nil), d.cost...)
			d.mu.Unlock()
			// The last token is sampled and not decoded: one step per prompt chunk, one per token after the first.
			if want := tc.promptSteps + tc.maxToken - 1; len(cost) != want {
				t.Fatalf("%d steps, want %d", len(cost), want)
			}
			sum := func(c []time.Duration) (s time.Duration) {
				for _, d := range c {
					s += d
				}
				return s
			}
			u := last.Usage
			if want := sum(cost[:tc.promptSteps]); u.PromptTime() != want {
				t.Errorf("PromptTime %v, want %v (steps %v)", u.PromptTime(), want, cost)
			}
			if want := sum(cost[tc.promptSteps:]); u.GenerationTime() != want {
				t.Errorf("GenerationTime %v, want %v (steps %v)", u.GenerationTime(), want, cost)
			}
			if want := time.Unix(1000, 0); !u.PromptStart.Equal(want) {
				t.Errorf("PromptStart %v, want the clock before the first step, %v", u.PromptStart, want)
			}
			if want := time.Unix(1000, 0).Add(sum(cost)); !u.LastToken.Equal(want) {
				t.Errorf("LastToken %v, want the clock after the last step, %v", u.LastToken, want)
			}
		})
	}
}

// TestTimingUsageZeroWithoutToken: a request that never sampled a token reports no prompt or
// generation time rather than a difference against the zero time.
func TestTimingUsageZeroWithoutToken(t *testing.T) {
	tests := []struct {
		name string
		u    Usage
	}{
		{name: "nothing", u: Usage{}},
		{name: "prompt started", u: Usage{PromptStart: time.Unix(5, 0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.u.PromptTime() != 0 || tc.u.GenerationTime() != 0 {
				t.Errorf("PromptTime %v, GenerationTime %v, want 0", tc.u.PromptTime(), tc.u.GenerationTime())
			}
		})
	}
}
