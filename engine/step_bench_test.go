package engine

import (
	"context"
	"fmt"
	"testing"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/quant"
)

// benchDecoder is a decoder that computes nothing: BenchmarkStep times the scheduler alone.
type benchDecoder struct {
	cfg kvcache.Config
	row []float32 // every token's logits: one clear winner, so sampling is cheap and fixed
}

func (d *benchDecoder) Decode(*batch.Batch) error { return nil }
func (d *benchDecoder) Logits(int) []float32      { return d.row }
func (d *benchDecoder) KVConfig() kvcache.Config  { return d.cfg }

// BenchmarkStep is the cost of one scheduling round (reap, admit, build, schedule, emit) with
// seqs sequences decoding on a decoder that computes nothing; a sequence that ends (after
// 128 tokens) is replaced by a new request, so a round's share of admissions is included.
func BenchmarkStep(b *testing.B) {
	for _, seqs := range []int{1, 16} {
		b.Run(fmt.Sprint("seqs=", seqs), func(b *testing.B) {
			d := &benchDecoder{cfg: kvcache.Config{NLayers: 1, KVDim: 2, BlockSize: 16, NumBlocks: 1024, DType: quant.F32, MaxSeqs: seqs},
				row: make([]float32, vocab)}
			d.row[5] = 10
			e, err := New(d, Limits{NCtx: 16 * 1024, NSeqMax: seqs, NBatch: 512, Vocab: vocab}, Config{MaxRunning: seqs})
			if err != nil {
				b.Fatal(err)
			}
			refill := func() {
				for len(e.running)+len(e.waiting) < seqs {
					if _, err := e.Submit(context.Background(), Request{Prompt: prompt(32, int32(e.arrivals.Load())), MaxTokens: 128, Sampling: greedy()}); err != nil {
						b.Fatal(err)
					}
					e.drainIncoming()
				}
			}
			refill()
			b.ReportAllocs()
			for b.Loop() {
				e.step()
				e.publish()
				refill()
			}
		})
	}
}
