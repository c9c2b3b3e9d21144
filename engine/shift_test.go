package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"ubatch/kvcache"

	"ubatch/batch"
)

// shiftDecoder is the fake model with a check after every batch: the KV blocks in use stay
// within peak, and every running sequence's first keep slots hold the prompt's first keep tokens
// at positions 0.. (what a context shift must never drop).
type shiftDecoder struct {
	*fakeDecoder
	prompt []int32
	keep   int
	peak   int // most blocks in use after any batch
	bad    error
	maxPos int32
}

func (d *shiftDecoder) Decode(b *batch.Batch) error {
	if err := d.fakeDecoder.Decode(b); err != nil {
		return err
	}
	kv := d.kv
	d.peak = max(d.peak, kv.Stats().Used)
	bs := int32(kv.Config().BlockSize)
	for i, p := range b.Pos {
		d.maxPos = max(d.maxPos, p)
		seq := int(b.Seqs[i][0])
		if int32(kv.SeqCells(seq)) < int32(d.keep) || d.bad != nil {
			continue
		}
		for j := range int32(d.keep) {
			cell := kv.Blocks(seq)[j/bs]*bs + j%bs
			if kv.Pos(cell) != j || kv.Token(cell) != d.prompt[j] {
				d.bad = fmt.Errorf("seq %d slot %d: position %d token %d, want %d and %d", seq, j, kv.Pos(cell), kv.Token(cell), j, d.prompt[j])
			}
		}
	}
	return nil
}

// TestContextShiftBoundsBlocks runs sequences far past their cap with ContextShift: each shift
// drops the older half after Keep tokens and compacts the rest, so the blocks in use never pass
// the sequences' caps (before, a shift emptied cells without releasing their blocks: one
// sequence of a 1024-cell context stopped at 1,022 tokens).
func TestContextShiftBoundsBlocks(t *testing.T) {
	tests := []struct {
		name      string
		nCtx      int // cells, blocks of 16
		nCtxSeq   int
		seqs      int
		keep      int
		maxTokens int
		wantGen   int // 0: maxTokens
	}{
		{name: "one sequence of 1024 cells, 3000 tokens", nCtx: 1024, nCtxSeq: 1024, seqs: 1, keep: 1, maxTokens: 3000},
		{name: "keep nothing", nCtx: 1024, nCtxSeq: 1024, seqs: 1, keep: 0, maxTokens: 3000},
		{name: "keep the whole prompt", nCtx: 1024, nCtxSeq: 1024, seqs: 1, keep: -1, maxTokens: 3000},
		{name: "keep 20 (past the first block)", nCtx: 256, nCtxSeq: 256, seqs: 1, keep: 20, maxTokens: 1000},
		{name: "two sequences of 256 in 512 cells", nCtx: 512, nCtxSeq: 256, seqs: 2, keep: 1, maxTokens: 1000},
		{name: "keep leaves nothing to drop", nCtx: 256, nCtxSeq: 64, seqs: 1, keep: 70, maxTokens: 1000, wantGen: 64 - 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := prompt(12, 5)
			keep := tc.keep
			if keep < 0 {
				keep = len(p)
			}
			d := &shiftDecoder{fakeDecoder: &fakeDecoder{cfg: fakeKV(tc.nCtx/16, 16, tc.seqs)}, prompt: p, keep: min(keep, len(p))}
			e, err := New(d, Limits{NCtx: tc.nCtx, NCtxSeq: tc.nCtxSeq, NSeqMax: tc.seqs, NBatch: 64, Vocab: vocab},
				Config{ContextShift: true, Keep: tc.keep})
			if err != nil {
				t.Fatal(err)
			}
			d.kv = e.kv.(*kvcache.Manager)
			ctx, cancel := context.WithCancel(context.Background())
			go e.Run(ctx)
			defer func() { cancel(); <-e.Done() }()
			var wg sync.WaitGroup
			gen := make([]int, tc.seqs)
			finish := make([]FinishReason, tc.seqs)
			for i := range tc.seqs {
				s, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: tc.maxTokens, Sampling: greedy()})
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					got, last := collect(t, s)
					gen[i], finish[i] = len(got), last.Finish
				})
			}
			wg.Wait()
			want := tc.wantGen
			if want == 0 {
				want = tc.maxTokens
			}
			for i := range tc.seqs {
				if gen[i] != want || finish[i] != FinishLength {
					t.Errorf("sequence %d: %d tokens, finish %q; want %d and length", i, gen[i], finish[i], want)
				}
			}
			if limit := tc.seqs * tc.nCtxSeq / 16; d.peak > limit {
				t.Errorf("%d blocks in use at the peak, want at most %d", d.peak, limit)
			}
			if d.maxPos >= int32(tc.nCtxSeq) {
				t.Errorf("a token at position %d, past the cap %d", d.maxPos, tc.nCtxSeq)
			}
			if d.bad != nil {
				t.Error(d.bad)
			}
			t.Logf("peak %d blocks, last position %d", d.peak, d.maxPos)
		})
	}
}
