package engine

import (
	"context"
	"errors"
	"testing"
)

// TestSequenceCap: Limits.NCtxSeq caps each sequence (prompt and generated tokens) below the
// KV pool's NCtx: a prompt that leaves no room is refused, and generation without MaxTokens,
// or with more, stops at the cap.
func TestSequenceCap(t *testing.T) {
	tests := []struct {
		name      string
		prompt    int
		maxTokens int
		wantErr   error
		wantGen   int
	}{
		{name: "no max_tokens stops at the cap", prompt: 10, wantGen: 10},
		{name: "max_tokens past the cap", prompt: 10, maxTokens: 50, wantGen: 10},
		{name: "max_tokens within the cap", prompt: 10, maxTokens: 4, wantGen: 4},
		{name: "room for one token", prompt: 19, wantGen: 1},
		{name: "prompt fills the cap", prompt: 20, wantErr: ErrPromptSize},
	}
	d := newFake(t, 64, 4, 2)
	e := start(t, d, Limits{NCtx: 256, NCtxSeq: 20, NSeqMax: 2, NBatch: 64, Vocab: vocab}, Config{})
	if got := e.Limits().NCtxSeq; got != 20 {
		t.Fatalf("NCtxSeq %d", got)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := prompt(tc.prompt, 3)
			s, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: tc.maxTokens, Sampling: greedy()})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Submit error %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			got, last := collect(t, s)
			if !equal(got, expected(p, tc.wantGen)) || last.Finish != FinishLength {
				t.Fatalf("generated %d tokens (finish %s), want %d", len(got), last.Finish, tc.wantGen)
			}
		})
	}
}

func TestLimitsValidation(t *testing.T) {
	d := newFake(t, 16, 4, 1)
	tests := []struct {
		name    string
		lim     Limits
		wantSeq int
		wantErr bool
	}{
		{name: "default cap", lim: Limits{NCtx: 64, NSeqMax: 1, NBatch: 8, Vocab: vocab}, wantSeq: 64},
		{name: "cap above the pool", lim: Limits{NCtx: 64, NCtxSeq: 100, NSeqMax: 1, NBatch: 8, Vocab: vocab}, wantSeq: 64},
		{name: "negative cap", lim: Limits{NCtx: 64, NCtxSeq: -1, NSeqMax: 1, NBatch: 8, Vocab: vocab}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(d, tc.lim, Config{})
			if (err != nil) != tc.wantErr {
				t.Fatalf("New: %v", err)
			}
			if err == nil && e.Limits().NCtxSeq != tc.wantSeq {
				t.Fatalf("NCtxSeq %d, want %d", e.Limits().NCtxSeq, tc.wantSeq)
			}
		})
	}
}
