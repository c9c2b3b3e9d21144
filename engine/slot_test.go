package engine

import (
	"context"
	"testing"
	"time"
)

// waitSlots polls the published slots until ok holds of them, failing the test after 10 s.
func waitSlots(t *testing.T, e *Engine, ok func([]Slot) bool) []Slot {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sl := e.Slots()
		if ok(sl) {
			return sl
		}
		if time.Now().After(deadline) {
			t.Fatalf("slots never as wanted: %+v", sl)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSlotsListEveryID: Slots lists the ids [0, MaxRunning), idle or not, as llama-server lists
// its n_parallel slots; a running request's slot carries its task number, sampling, priority and
// counts; the slot is idle again once the request ends.
func TestSlotsListEveryID(t *testing.T) {
	tests := []struct {
		name            string
		seqMax, running int
		wantSlots       int
	}{
		{name: "all sequence ids", seqMax: 3, running: 0, wantSlots: 3},
		{name: "MaxRunning below them", seqMax: 4, running: 2, wantSlots: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newFake(t, 64, 4, tc.seqMax)
			d.delay = time.Millisecond // keeps the request running while the test looks
			e := startHooked(t, d, Limits{NCtx: 256, NSeqMax: tc.seqMax, NBatch: 64, Vocab: vocab},
				Config{MaxRunning: tc.running}, nil, nil)
			idle := func(sl []Slot) bool {
				for i, s := range sl {
					if s.Running || s.ID != int32(i) {
						return false
					}
				}
				return len(sl) == tc.wantSlots
			}
			waitSlots(t, e, idle)

			smp := greedy()
			smp.Seed = 77
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := e.Submit(ctx, Request{Prompt: prompt(6, 1), MaxTokens: 5000, Sampling: smp, Priority: PriorityHigh})
			if err != nil {
				t.Fatal(err)
			}
			sl := waitSlots(t, e, func(sl []Slot) bool { return len(sl) == tc.wantSlots && sl[0].Running && sl[0].Generated > 0 })
			s := sl[0]
			if s.ID != 0 || s.Task == 0 || s.Sampling.Seed != 77 || s.Priority != PriorityHigh || s.PromptTokens != 6 ||
				s.MaxTokens != 5000 || s.Prefilling || s.Processed < 6 {
				t.Errorf("running slot %+v", s)
			}
			for _, o := range sl[1:] {
				if o.Running {
					t.Errorf("slot %d running beside the one request: %+v", o.ID, o)
				}
			}
			st.Cancel(FinishCancelled)
			collect(t, st)
			waitSlots(t, e, idle)
		})
	}
}
