package engine

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"ubatch/batch"
)

const embedDim = 3

// state is the fake model's final hidden state of token tok at position pos: it depends only on
// (tok, pos), as a causal model's does on the prefix, so an embedding is fixed however its
// prompt is chunked or batched.
func state(tok, pos int32) []float32 {
	return []float32{float32(tok) + 1, float32(pos%7) - 3, float32((tok*pos)%5) * 0.5}
}

// embedFake is fakeDecoder with hidden states for the tokens marked Hidden; it records, per
// batch, how many hidden and how many logits tokens it carried.
type embedFake struct {
	*fakeDecoder
	clock   *fakeClock // when set, each Decode advances it by stepCost
	hidden  [][]float32
	mu      sync.Mutex
	steps   []embedStep
	hiddenN int // hidden-state outputs computed in all
}

type embedStep struct {
	hidden, logits, tokens int
	cost                   time.Duration // stepCost, on a clock
	seqs                   []int32       // sequence ids with a token in the batch
}

func (f *embedFake) Decode(b *batch.Batch) error {
	if f.clock != nil {
		f.clock.advance(stepCost(b))
	}
	if err := f.fakeDecoder.Decode(b); err != nil {
		return err
	}
	f.hidden = f.hidden[:0]
	st := embedStep{tokens: b.Len(), cost: stepCost(b)}
	for i := range b.Len() {
		var h []float32
		if i < len(b.Hidden) && b.Hidden[i] {
			if !b.Logits[i] {
				return errors.New("embedFake: a Hidden token without its output flag")
			}
			h = state(b.Tokens[i], b.Pos[i])
			st.hidden++
		} else if b.Logits[i] {
			st.logits++
		}
		f.hidden = append(f.hidden, h)
		if !slices.Contains(st.seqs, b.Seqs[i][0]) {
			st.seqs = append(st.seqs, b.Seqs[i][0])
		}
	}
	f.mu.Lock()
	f.steps = append(f.steps, st)
	f.hiddenN += st.hidden
	f.mu.Unlock()
	return nil
}

func (f *embedFake) Embedding(i int) []float32 { return f.hidden[i] }

func (f *embedFake) record() ([]embedStep, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.steps), f.hiddenN
}

func startEmbed(t *testing.T, blocks int, lim Limits, cfg Config) (*Engine, *embedFake) {
	t.Helper()
	f := &embedFake{fakeDecoder: newFake(t, blocks, 4, lim.NSeqMax)}
	e, err := New(f, lim, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, e)
	return e, f
}

// wantEmbedding is the embedding of prompt under the fake model, computed directly.
func wantEmbedding(prompt []int32, pool Pooling, normalize bool) []float32 {
	sum := make([]float64, embedDim)
	n := 0
	for p, tok := range prompt {
		if !pool.wants(p, len(prompt)) {
			continue
		}
		for j, v := range state(tok, int32(p)) {
			sum[j] += float64(v)
		}
		n++
	}
	st := embedState{normalize: normalize, sum: sum, n: n}
	return st.pooled()
}

// embedAll reads an embedding stream to its end: the embeddings by Output.Seq, and the finals.
func embedAll(t *testing.T, s *Stream, n int) ([][]float32, []Output) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vecs, finals := make([][]float32, n), make([]Output, n)
	for {
		o, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return vecs, finals
		}
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if !o.Done {
			t.Fatalf("an embedding stream sent a token: %+v", o)
		}
		vecs[o.Seq], finals[o.Seq] = o.Embedding, o
	}
}

// TestEmbedPooling: an embedding request's answer is its pooled hidden states whatever the
// chunking and whatever decodes beside it, with every pooling, normalized or not; a generation
// stream running meanwhile gets its greedy tokens, one decode token in every step.
func TestEmbedPooling(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pool      Pooling
		normalize bool
		chunk     int
	}{
		{"mean normalized", PoolMean, true, 5},
		{"mean raw", PoolMean, false, 3},
		{"cls", PoolCLS, true, 4},
		{"last normalized", PoolLast, true, 7},
		{"last raw one chunk", PoolLast, false, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, f := startEmbed(t, 64, Limits{NCtx: 256, NSeqMax: 6, NBatch: 64, Vocab: vocab},
				Config{BatchSize: 16, ChunkSize: tc.chunk})
			gen, err := e.Submit(context.Background(), Request{Prompt: prompt(5, 9), MaxTokens: 30, Sampling: greedy()})
			if err != nil {
				t.Fatal(err)
			}
			prompts := [][]int32{prompt(23, 1), prompt(1, 2), prompt(40, 3), prompt(17, 4)}
			reqs := make([]EmbedRequest, len(prompts))
			for i, p := range prompts {
				reqs[i] = EmbedRequest{Prompt: p, Pooling: tc.pool, Normalize: tc.normalize, Priority: PriorityLow}
			}
			s, err := e.SubmitEmbed(context.Background(), reqs...)
			if err != nil {
				t.Fatal(err)
			}
			vecs, finals := embedAll(t, s, len(prompts))
			for i, p := range prompts {
				if want := wantEmbedding(p, tc.pool, tc.normalize); !slices.Equal(vecs[i], want) || finals[i].Finish != FinishStop {
					t.Errorf("input %d: %v (%s, %v), want %v", i, vecs[i], finals[i].Finish, finals[i].Err, want)
				}
				if finals[i].Usage.PromptTokens != len(p) {
					t.Errorf("input %d: usage %+v", i, finals[i].Usage)
				}
			}
			toks, last := collect(t, gen)
			if want := expected(prompt(5, 9), 30); !slices.Equal(toks, want) || last.Finish != FinishLength {
				t.Errorf("generation beside the embeddings: %v (%s), want %v", toks, last.Finish, want)
			}
			steps, _ := f.record()
			for i, st := range steps {
				if st.tokens > 16 {
					t.Errorf("step %d: %d tokens over the budget of 16", i, st.tokens)
				}
			}
		})
	}
}

// TestEmbedLimits: SubmitEmbed refuses, queueing nothing, what cannot be embedded.
func TestEmbedLimits(t *testing.T) {
	e, _ := startEmbed(t, 64, Limits{NCtx: 256, NCtxSeq: 32, NSeqMax: 4, NBatch: 64, Vocab: vocab},
		Config{Embed: EmbedConfig{MaxQueue: 3}})
	for _, tc := range []struct {
		name string
		reqs []EmbedRequest
		want error
	}{
		{"none", nil, ErrPromptSize},
		{"empty input", []EmbedRequest{{Prompt: prompt(3, 1)}, {}}, ErrPromptSize},
		{"longer than a sequence", []EmbedRequest{{Prompt: prompt(33, 1)}}, ErrPromptSize},
		{"over the queue", []EmbedRequest{{Prompt: prompt(3, 1)}, {Prompt: prompt(3, 2)}, {Prompt: prompt(3, 3)}, {Prompt: prompt(3, 4)}}, ErrQueueFull},
		{"bad token", []EmbedRequest{{Prompt: []int32{1, vocab}}}, nil},
		{"bad pooling", []EmbedRequest{{Prompt: prompt(3, 1), Pooling: "max"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := e.SubmitEmbed(context.Background(), tc.reqs...)
			if err == nil || s != nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("SubmitEmbed = %v, %v; want %v", s, err, tc.want)
			}
		})
	}
	// At the limits it is served.
	s, err := e.SubmitEmbed(context.Background(), EmbedRequest{Prompt: prompt(32, 1)}, EmbedRequest{Prompt: prompt(1, 2)}, EmbedRequest{Prompt: prompt(2, 3)})
	if err != nil {
		t.Fatal(err)
	}
	if vecs, _ := embedAll(t, s, 3); vecs[0] == nil || vecs[1] == nil || vecs[2] == nil {
		t.Errorf("embeddings at the limits: %v", vecs)
	}

	plain, err := New(newFake(t, 8, 4, 2), Limits{NCtx: 32, NSeqMax: 2, NBatch: 8, Vocab: vocab}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.SubmitEmbed(context.Background(), EmbedRequest{Prompt: prompt(3, 1)}); !errors.Is(err, ErrNoEmbeddings) {
		t.Errorf("a decoder without hidden states: %v, want ErrNoEmbeddings", err)
	}
}

// TestEmbedCancel: an embedding request whose client left is dropped at the next step, running
// or waiting: its final output says cancelled, and no token of it is decoded afterwards.
func TestEmbedCancel(t *testing.T) {
	e, f := startEmbed(t, 256, Limits{NCtx: 1024, NSeqMax: 4, NBatch: 64, Vocab: vocab},
		Config{BatchSize: 8, ChunkSize: 8, Embed: EmbedConfig{MaxRunning: 1}})
	f.delay = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	reqs := []EmbedRequest{{Prompt: prompt(400, 1)}, {Prompt: prompt(400, 2)}} // the second waits: MaxRunning 1
	s, err := e.SubmitEmbed(ctx, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, n := f.record(); n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	vecs, finals := embedAll(t, s, 2)
	for i := range 2 {
		if vecs[i] != nil || finals[i].Finish != FinishCancelled {
			t.Errorf("input %d: %v, %s", i, vecs[i], finals[i].Finish)
		}
	}
	_, n := f.record()
	if n >= 400 {
		t.Errorf("%d hidden states computed: the cancelled inputs ran on", n)
	}
	// The engine is free again: a generation request runs.
	gen, err := e.Submit(context.Background(), Request{Prompt: prompt(4, 1), MaxTokens: 3, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	if toks, _ := collect(t, gen); !slices.Equal(toks, expected(prompt(4, 1), 3)) {
		t.Errorf("after the cancel: %v", toks)
	}
}

// TestEmbedSlots: at most EmbedConfig.MaxRunning embedding sequences run at once, so a batch of
// inputs leaves slots to generation requests, which are admitted while the embeddings go on and
// decode in every step they share.
func TestEmbedSlots(t *testing.T) {
	e, f := startEmbed(t, 256, Limits{NCtx: 1024, NSeqMax: 4, NBatch: 64, Vocab: vocab},
		Config{BatchSize: 16, ChunkSize: 8, Embed: EmbedConfig{MaxRunning: 2}})
	f.delay = 200 * time.Microsecond
	var reqs []EmbedRequest
	for i := range 8 {
		reqs = append(reqs, EmbedRequest{Prompt: prompt(60, int32(i)), Priority: PriorityLow, Normalize: true})
	}
	s, err := e.SubmitEmbed(context.Background(), reqs...)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := e.Submit(context.Background(), Request{Prompt: prompt(6, 3), MaxTokens: 20, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	vecs, _ := embedAll(t, s, len(reqs))
	for i, r := range reqs {
		if want := wantEmbedding(r.Prompt, PoolMean, true); !slices.Equal(vecs[i], want) {
			t.Errorf("input %d: %v, want %v", i, vecs[i], want)
		}
	}
	if toks, _ := collect(t, gen); !slices.Equal(toks, expected(prompt(6, 3), 20)) {
		t.Errorf("generation: %v", toks)
	}
	steps, _ := f.record()
	for i, st := range steps {
		embeds := len(st.seqs)
		if st.logits > 0 {
			embeds-- // the generation sequence
		}
		if embeds > 2 {
			t.Errorf("step %d: %d embedding sequences, MaxRunning is 2 (%+v)", i, embeds, st)
		}
	}
}

// TestEmbedBudget: embedding prompts share the step budget of prompt chunks under the latency
// target (fake step costs, budget_test's): beside four decoding streams, once the cost model is
// fitted every step that carries embedding tokens costs at most the target; when the decode
// tokens alone exceed it, an embedding gets the floor chunk only once per embedFloorWait steps,
// where a generation prompt gets it every step. Either way the embedding completes correctly.
func TestEmbedBudget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target time.Duration
		embed  int  // tokens of the embedding
		floor  bool // decode alone exceeds the target
	}{
		{"within the target", 20 * time.Millisecond, 600, false},
		{"decode over the target", 5 * time.Millisecond, 16, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &embedFake{fakeDecoder: newFake(t, 2048, 16, 8), clock: &fakeClock{now: time.Unix(0, 0)}}
			f.delay = 20 * time.Microsecond
			rec := &stepRecorder{}
			e, err := New(f, Limits{NCtx: 32768, NSeqMax: 8, NBatch: 1024, Vocab: vocab},
				Config{BatchSize: 1024, ChunkSize: 1024, TargetITL: tc.target, Observer: rec})
			if err != nil {
				t.Fatal(err)
			}
			e.now = f.clock.Now
			stop := run(t, e)
			ctx := context.Background()
			var decoders []*Stream
			for i := range 4 {
				s, err := e.Submit(ctx, Request{Prompt: prompt(3+i, int32(i)), MaxTokens: 6000, Sampling: greedy()})
				if err != nil {
					t.Fatal(err)
				}
				decoders = append(decoders, s)
			}
			recvEach(t, decoders, 2*minFitSteps) // the cost model sees decode-only steps
			// Prompts of several sizes beside the streams fit the cost model; under the floor
			// case each generation prompt gets the floor in every step.
			for i, n := range []int{40, 24, 56, 32, 48} {
				gen, err := e.Submit(ctx, Request{Prompt: prompt(n, int32(10+i)), MaxTokens: 1, Sampling: greedy()})
				if err != nil {
					t.Fatal(err)
				}
				collect(t, gen)
			}
			p := prompt(tc.embed, 5)
			es, err := e.SubmitEmbed(ctx, EmbedRequest{Prompt: p, Normalize: true, Priority: PriorityLow})
			if err != nil {
				t.Fatal(err)
			}
			vecs, _ := embedAll(t, es, 1)
			stop() // every step's observation is in before the records are read
			if want := wantEmbedding(p, PoolMean, true); !slices.Equal(vecs[0], want) {
				t.Errorf("embedding %v, want %v", vecs[0], want)
			}
			steps, _ := f.record()
			infos := rec.snapshot()
			var withEmbed, floorSteps, genFloor, over int
			first, last := -1, -1
			reasons := map[BudgetReason]int{}
			for i, st := range steps {
				if i >= len(infos) || infos[i].DecodeTokens != 4 {
					continue
				}
				if st.hidden == 0 && infos[i].PrefillTokens > 0 && infos[i].Reason == BudgetFloor {
					genFloor++
				}
				if st.hidden > 0 {
					if first < 0 {
						first = i
					}
					last = i
					reasons[infos[i].Reason]++
					withEmbed++
					if infos[i].Reason == BudgetFloor {
						floorSteps++
					}
					if (infos[i].Reason == BudgetTarget || infos[i].Reason == BudgetBatchSize) && st.cost > tc.target {
						over++
						t.Errorf("step %d: %d tokens with %d of the embedding cost %v, over the target %v", i, st.tokens, st.hidden, st.cost, tc.target)
					}
				}
			}
			if reasons[BudgetLearning] > 0 {
				t.Errorf("embedding steps by reason %v: the cost model was not fitted first", reasons)
			}
			if withEmbed == 0 {
				t.Fatal("no step carried embedding tokens beside the streams")
			}
			if tc.floor {
				if genFloor < 10 {
					t.Errorf("the generation prompts got the floor in %d steps, want one per step once the model is fitted", genFloor)
				}
				if want := (tc.embed + minChunk - 1) / minChunk; floorSteps != want {
					t.Errorf("the embedding took the floor in %d steps, want %d", floorSteps, want)
				}
				if n := last - first; n < embedFloorWait*(floorSteps-1) {
					t.Errorf("%d floor chunks of the embedding within %d steps: more than one per %d", floorSteps, n, embedFloorWait)
				}
			}
		})
	}
}
