package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
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
			if !slices.Equal(got, expected(p, tc.wantGen)) || last.Finish != FinishLength {
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

// TestLongPromptNotStarved: under SJF with an 8-token budget and at most 4 sequences running
// (so at least 4 tokens of each step go to prompts), three clients keep short prompts coming that
// would take every step's prompt budget ahead of a long one; the long one must still get a chunk
// after at most maxPrefillWait steps without one (plus one for its admission). Without the
// bound it waited 14 steps in a row.
func TestLongPromptNotStarved(t *testing.T) {
	d := newFake(t, 256, 4, 8)
	d.delay = 2 * time.Millisecond // slow steps: the clients resubmit well within one
	d.keepPos = true
	e := start(t, d, Limits{NCtx: 1024, NSeqMax: 8, NBatch: 64, Vocab: vocab},
		Config{BatchSize: 8, ChunkSize: 8, MaxRunning: 4, Policy: SJF, MaxQueue: 64})
	ctx := context.Background()
	const mark = vocab - 1 // every token of the long prompt, in no short prompt
	var wg sync.WaitGroup
	for c := range 3 { // with the long one, the 4 slots: it is admitted at once
		wg.Go(func() {
			for i := range 30 {
				p := make([]int32, 16)
				for j := range p {
					p[j] = int32(c*30+i+j) % mark
				}
				s, err := e.Submit(ctx, Request{Prompt: p, MaxTokens: 2, Sampling: greedy()})
				if err != nil {
					t.Error(err)
					return
				}
				collect(t, s)
			}
		})
	}
	for deadline := time.Now().Add(5 * time.Second); e.Stats().Generated < 4 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond) // the short requests are flowing
	}
	lp := make([]int32, 120)
	for i := range lp {
		lp[i] = mark
	}
	d.mu.Lock()
	from := len(d.positions) // the long request is admitted at one of the next steps
	d.mu.Unlock()
	long, err := e.Submit(ctx, Request{Prompt: lp, MaxTokens: 1, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, long)
	wg.Wait()
	// A batch carries a chunk of the long prompt when it holds the mark at a position a short
	// request's generated tokens (16, 17) never take.
	d.mu.Lock()
	defer d.mu.Unlock()
	gap, worst, started := 0, 0, false
	for _, b := range d.positions[from:] {
		has := false
		for k, p := range b.pos {
			has = has || (b.tok[k] == mark && p != 16 && p != 17)
		}
		if has {
			started = true
			worst, gap = max(worst, gap), 0
		} else {
			gap++
		}
		if slices.Contains(b.pos, 119) {
			break
		}
	}
	if !started {
		t.Fatal("no batch carried the long prompt")
	}
	if worst > maxPrefillWait+1 {
		t.Fatalf("the long prompt was passed over %d steps in a row, bound %d", worst, maxPrefillWait+1)
	}
	t.Logf("passed over at most %d steps in a row", worst)
}
