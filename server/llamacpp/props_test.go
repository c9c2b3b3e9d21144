package llamacpp

import (
	"context"
	"testing"
	"time"
	"ubatch/engine"
	"ubatch/internal/testkit"
	"ubatch/server/servertest"
)

// slotView reads a /slots entry: encoding/json cannot fill slotJSON's embedded pointer to an
// unexported type, so the task's fields are here by value (zero when idle: slotHead says so).
type slotView struct {
	slotHead
	slotTask
}

// TestSlots: /slots lists every slot as llama-server does (the engine's MaxRunning of them), idle
// ones with id_task -1; a running stream's slot shows its task, its sampling parameters under
// llama-server's names and its next_token counts, the other slots staying idle.
func TestSlots(t *testing.T) {
	tests := []struct {
		name       string
		maxRunning int
		wantSlots  int
	}{
		{name: "n_seq_max", wantSlots: 8},
		{name: "parallel below it", maxRunning: 3, wantSlots: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, servertest.Options{Engine: engine.Config{MaxRunning: tc.maxRunning}})
			var idle []slotView
			e.GetJSON("/slots", &idle)
			checkSlots(t, idle, tc.wantSlots, -1)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			resp := e.Post(ctx, "/completion", map[string]any{"prompt": "Once upon a time", "n_predict": 400, "ignore_eos": true,
				"stream": true, "seed": 42, "temperature": 0.5, "top_k": 7})
			defer resp.Body.Close()
			var slots []slotView
			testkit.Eventually(t, 5*time.Second, "a slot that decodes", func() bool {
				slots = nil
				e.GetJSON("/slots", &slots)
				return len(slots) > 0 && slots[0].IsProcessing && slots[0].NDecoded > 0
			})
			checkSlots(t, slots, tc.wantSlots, 0)
			s := slots[0]
			next := s.NextToken
			if s.IDTask < 0 || s.State != "decoding" || s.NPromptTokens < 2 || s.NPromptTokensProcessed+s.NPromptTokensCache != s.NPromptTokens ||
				s.Params.Seed != 42 || s.Params.Temperature != 0.5 || s.Params.TopK != 7 || s.Params.NPredict != 400 ||
				len(next) != 1 || !next[0].HasNextToken || next[0].NDecoded < 1 || next[0].NRemain != 400-next[0].NDecoded {
				t.Errorf("running slot %+v", s)
			}
		})
	}
}

// checkSlots checks that slots are ids [0, n), n_ctx the sequence cap, and all idle but busy
// (-1: none).
func checkSlots(t *testing.T, slots []slotView, n, busy int) {
	t.Helper()
	if len(slots) != n {
		t.Fatalf("%d slots, want %d: %+v", len(slots), n, slots)
	}
	for i, s := range slots {
		if s.ID != int32(i) || s.NCtx != 512 || s.Speculative {
			t.Errorf("slot %d: %+v", i, s)
		}
		if i == busy {
			continue
		}
		if s.IsProcessing || s.IDTask != -1 || s.State != "idle" || s.NPromptTokens != 0 || s.NextToken != nil {
			t.Errorf("slot %d not idle: %+v", i, s)
		}
	}
}
