package all_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"ubatch/engine"
	"ubatch/internal/testmodel"
	"ubatch/recstate"
	"ubatch/runner"
	"ubatch/sample"
)

// TestEngineEqualsAlonePerFamily runs what the batching design promises on every family: eight
// greedy requests sharing a 20-token prefix go through one engine with a KV pool too small for
// all of them at once (shared prefixes, prefix cache, mixed prefill and decode steps, and
// preemption), and each output must equal the same request run alone. Requests are submitted
// after four one-token requests have lowered the admission watermark's growth estimate.
func TestEngineEqualsAlonePerFamily(t *testing.T) {
	prefix := []int32{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 300, 310, 320, 330, 340, 350, 360, 370, 380, 390}
	var prompts [][]int32
	for i := range 8 {
		prompts = append(prompts, append(slices.Clone(prefix), int32(100+10*i), int32(101+10*i), int32(102+i)))
	}
	const maxTokens = 20
	greedy := sample.DefaultParams()
	greedy.Temperature = 0
	for _, tc := range decodeModels {
		// Both attentions: the tiled one (runner.Options.TiledAttention, where AVX-512 runs it)
		// must not make a token's result depend on its batch either.
		for _, tiled := range []bool{false, true} {
			name := tc.name
			if tiled {
				name += "/tiled"
			}
			t.Run(name, func(t *testing.T) {
				m := load(t, tc.file, false)
				run := func(nCtx, nSeq int, ps [][]int32) ([][]int32, engine.Stats) {
					c := testmodel.Runtime(t, m, runner.Options{NCtx: nCtx, NSeqMax: nSeq, NBatch: 256, NUBatch: 64, Threads: 2, TiledAttention: tiled})
					o := c.Options()
					eng, err := engine.New(c, engine.Limits{NCtx: o.NCtx, NSeqMax: o.NSeqMax, NBatch: o.NBatch, Vocab: m.Hparams().Vocab},
						engine.Config{BatchSize: 64, ChunkSize: 16})
					if err != nil {
						t.Fatal(err)
					}
					submit := func(ps [][]int32, maxTokens int) []*engine.Stream {
						var streams []*engine.Stream
						for _, p := range ps {
							st, err := eng.Submit(context.Background(), engine.Request{Prompt: p, MaxTokens: maxTokens,
								Sampling: greedy})
							if err != nil {
								t.Fatal(err)
							}
							streams = append(streams, st)
						}
						return streams
					}
					// Short requests first teach the admission watermark that completions are short,
					// so that it admits more growth than the pool holds: preemption then follows.
					warm := submit([][]int32{{1, 2}, {1, 3}, {1, 4}, {1, 5}}, 1)
					ctx, cancel := context.WithCancel(context.Background())
					go eng.Run(ctx)
					defer func() { cancel(); <-eng.Done() }()
					for _, st := range warm {
						for {
							if _, err := st.Recv(context.Background()); err != nil {
								break
							}
						}
					}
					return collect(t, submit(ps, maxTokens), 1), eng.Stats()
				}
				// 8 sequences of up to 43 tokens need 8x3 blocks of 16 cells beyond the shared
				// prefix; 128 cells (8 blocks) force preemption.
				got, st := run(128, 8, prompts)
				for i, p := range prompts {
					alone, _ := run(256, 1, [][]int32{p})
					if !slices.Equal(got[i], alone[0]) {
						t.Errorf("request %d: batched %v, alone %v", i, got[i], alone[0])
					}
				}
				if st.PromptCached == 0 || st.Preemptions == 0 {
					t.Errorf("want both prefix-cache hits and preemptions, got %+v", st)
				}
				t.Logf("steps %d, preemptions %d, prompt tokens computed %d, cached %d", st.Steps, st.Preemptions, st.PromptComputed, st.PromptCached)
			})
		}
	}
}

// TestContextShift: with ContextShift a sequence runs past the per-sequence cap (its older half
// dropped and the rest shifted, keys re-rotated), on every family; without it, it stops there.
func TestContextShift(t *testing.T) {
	greedy := sample.DefaultParams()
	greedy.Temperature = 0
	prompt := []int32{1, 403, 407, 261, 378, 432, 383, 286}
	for _, tc := range decodeModels {
		t.Run(tc.name, func(t *testing.T) {
			m := load(t, tc.file, false)
			for _, shift := range []bool{false, true} {
				c := testmodel.Runtime(t, m, runner.Options{NCtx: 128, NSeqMax: 1, Threads: 2})
				o := c.Options()
				eng, err := engine.New(c, engine.Limits{NCtx: o.NCtx, NCtxSeq: 32, NSeqMax: 1, NBatch: o.NBatch, Vocab: m.Hparams().Vocab},
					engine.Config{ContextShift: shift})
				if c.Recurrent() && shift {
					// A recurrent state summarizes every token since position 0: it cannot drop
					// the older half.
					if !errors.Is(err, engine.ErrRecurrentShift) || !errors.Is(err, recstate.ErrContextShift) {
						t.Fatalf("context shift on a hybrid model: got %v, want %v", err, engine.ErrRecurrentShift)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				st, err := eng.Submit(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 80, Sampling: greedy})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				go eng.Run(ctx)
				n, last := 0, engine.Output{}
				for {
					o, err := st.Recv(context.Background())
					if err != nil {
						break
					}
					if o.Done {
						last = o
					} else {
						n++
					}
				}
				cancel()
				<-eng.Done()
				want := 32 - len(prompt)
				if shift {
					want = 80
				}
				if last.Finish != engine.FinishLength || n != want {
					t.Errorf("context shift %v: %d tokens, finish %q (%v), want %d and length", shift, n, last.Finish, last.Err, want)
				}
			}
		})
	}
}
