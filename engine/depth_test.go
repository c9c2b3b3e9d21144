package engine

import (
	"context"
	"testing"
	"time"

	"ubatch/batch"
)

// deepCost is a step cost whose prompt attention costs four times decode attention per cell: 3 ms
// + 1 ms per decode token + 0.25 ms per prompt token + 0.25 ms per 1024 cells a decode token
// attends + 1 ms per 1024 cells a prompt token attends. A prompt chunk deep in a long input
// costs mostly its attention.
func deepCost(b *batch.Batch) time.Duration {
	per := map[int32]int{}
	for i := range b.Len() {
		per[b.Seqs[i][0]]++
	}
	cost := 3 * time.Millisecond
	var decodeCells, promptCells int
	for i := range b.Len() {
		if per[b.Seqs[i][0]] == 1 {
			cost += time.Millisecond
			decodeCells += int(b.Pos[i]) + 1
		} else {
			cost += 250 * time.Microsecond
			promptCells += int(b.Pos[i]) + 1
		}
	}
	return cost + time.Duration(decodeCells)*250*time.Microsecond/1024 + time.Duration(promptCells)*time.Millisecond/1024
}

// timedEmbed is a timedDecoder that also returns hidden states (one value each), for
// embedding inputs.
type timedEmbed struct{ *timedDecoder }

func (timedEmbed) Embedding(int) []float32 { return []float32{1} }

// TestChunksPricedByDepth: eight sequences decode at ~1000 cells each while a 3000-token prompt
// and a 3000-token embedding input are computed beside them under a 40 ms target, on deepCost.
// Every step sized to the target costs at most the target, however deep its chunk: the cost
// model prices a chunk's attention at its depth apart from the decode tokens' (with one
// coefficient for both the deep chunks ran up to 50% over).
func TestChunksPricedByDepth(t *testing.T) {
	const target = 40 * time.Millisecond
	tests := []struct {
		name  string
		embed bool
	}{
		{name: "generation prompt"},
		{name: "embedding input", embed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newTimed(t, 4096, 16, 16)
			d.costOf = deepCost
			d.delay = 20 * time.Microsecond
			rec := &stepRecorder{}
			e := startHooked(t, timedEmbed{d}, Limits{NCtx: 65536, NSeqMax: 16, NBatch: 1024, Vocab: vocab},
				Config{BatchSize: 1024, ChunkSize: 1024, TargetITL: target, Observer: rec}, nil, d.clock.Now)
			ctx := context.Background()
			var decoders []*Stream
			for i := range 8 {
				s, err := e.Submit(ctx, Request{Prompt: prompt(1000, int32(i)), MaxTokens: 3000, Sampling: greedy()})
				if err != nil {
					t.Fatal(err)
				}
				decoders = append(decoders, s)
			}
			recvEach(t, decoders, 1)
			recvEach(t, decoders, 2*minFitSteps)
			var long *Stream
			var err error
			if tc.embed {
				long, err = e.SubmitEmbed(ctx, EmbedRequest{Prompt: prompt(3000, 99), Priority: PriorityNormal})
			} else {
				long, err = e.Submit(ctx, Request{Prompt: prompt(3000, 99), MaxTokens: 1, Sampling: greedy()})
			}
			if err != nil {
				t.Fatal(err)
			}
			collect(t, long)
			steps, costs := endDecoders(decoders, rec, d)
			sized, worst := 0, time.Duration(0)
			for i, s := range steps {
				if s.Reason != BudgetTarget || s.DecodeTokens != 8 || s.PrefillTokens == 0 {
					continue
				}
				sized++
				worst = max(worst, costs[i])
			}
			t.Logf("%d steps sized to the target, the costliest %v (target %v)", sized, worst, target)
			if sized < 20 {
				t.Fatalf("only %d steps with a chunk sized to the target", sized)
			}
			if worst > target {
				t.Fatalf("a step with a prompt chunk cost %v, over the %v target", worst, target)
			}
		})
	}
}
