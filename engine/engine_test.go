package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/quant"
	"ubatch/sample"
)

const vocab = 64

// next is the fake model: the greedy successor of token tok at position pos. It depends only on
// (tok, pos), so a sequence's greedy continuation is fixed however it is batched or recomputed.
func next(tok, pos int32) int32 { return (tok*7 + pos*3 + 1) % vocab }

// fakeDecoder stands in for the model: it takes the batch's KV schedule like the real one (the
// engine's manager reserved the cells), records every batch, and produces logits peaked at
// next(tok, pos).
type fakeDecoder struct {
	cfg kvcache.Config
	// kv is the engine's manager, for tests that inspect it (set by start); read only.
	kv      *kvcache.Manager
	logits  [][]float32
	mu      sync.Mutex
	batches []int // tokens per batch
	delay   time.Duration
	cells   []int32
	// keepPos: record every batch's positions and tokens in positions.
	keepPos   bool
	positions []struct{ pos, tok []int32 }
}

func newFake(t *testing.T, blocks, blockSize, seqs int) *fakeDecoder {
	t.Helper()
	return &fakeDecoder{cfg: fakeKV(blocks, blockSize, seqs)}
}

// fakeKV is the KV layout a fake decoder reports.
func fakeKV(blocks, blockSize, seqs int) kvcache.Config {
	return kvcache.Config{NLayers: 1, KVDim: 2, BlockSize: blockSize, NumBlocks: blocks, DType: quant.F32, MaxSeqs: seqs}
}

func (f *fakeDecoder) KVConfig() kvcache.Config { return f.cfg }

func (f *fakeDecoder) Decode(b *batch.Batch) error {
	if err := checkSchedule(b, f.cfg.MaxSeqs); err != nil {
		return err
	}
	f.cells = append(f.cells[:0], b.KV.Slots...)
	f.logits = f.logits[:0]
	for i := range b.Len() {
		row := make([]float32, vocab)
		row[next(b.Tokens[i], b.Pos[i])] = 10
		f.logits = append(f.logits, row)
	}
	f.mu.Lock()
	f.batches = append(f.batches, b.Len())
	if f.keepPos {
		f.positions = append(f.positions, struct{ pos, tok []int32 }{slices.Clone(b.Pos), slices.Clone(b.Tokens)})
	}
	f.mu.Unlock()
	time.Sleep(f.delay)
	return nil
}

func (f *fakeDecoder) Logits(i int) []float32 { return f.logits[i] }

// checkSchedule is what a fake decoder checks of a batch: valid, and scheduled by the engine's
// manager (a cell per token, the tables of every sequence).
func checkSchedule(b *batch.Batch, nSeq int) error {
	if err := b.Validate(vocab, nSeq); err != nil {
		return err
	}
	if b.KV == nil || len(b.KV.Slots) != b.Len() || len(b.KV.Tables) != nSeq {
		return fmt.Errorf("fake decoder: batch of %d tokens without its KV schedule (%+v)", b.Len(), b.KV)
	}
	return nil
}

func (f *fakeDecoder) maxBatch() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := 0
	for _, n := range f.batches {
		m = max(m, n)
	}
	return m
}

// expected is the greedy continuation of prompt under the fake model.
func expected(prompt []int32, n int) []int32 {
	var out []int32
	tok, pos := prompt[len(prompt)-1], int32(len(prompt)-1)
	for range n {
		tok = next(tok, pos)
		pos++
		out = append(out, tok)
	}
	return out
}

func start(t *testing.T, d *fakeDecoder, lim Limits, cfg Config) *Engine {
	t.Helper()
	e, err := New(d, lim, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.kv = e.kv.(*kvcache.Manager)
	run(t, e)
	return e
}

// run runs e until the test ends; stop ends Run sooner (and waits for it) and may be called
// again.
func run(t testing.TB, e *Engine) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	go e.Run(ctx)
	stop = func() { cancel(); <-e.Done() }
	t.Cleanup(stop)
	return stop
}

func greedy() sample.Params { return sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 1} }

// collect reads a stream to its end.
func collect(t *testing.T, s *Stream) ([]int32, Output) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var toks []int32
	var last Output
	for {
		o, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return toks, last
		}
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if o.Done {
			last = o
			continue
		}
		toks = append(toks, o.Token)
	}
}

func prompt(n int, seed int32) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = (seed*13 + int32(i)*5) % vocab
	}
	return p
}

func TestConcurrentRequestsMatchAlone(t *testing.T) {
	tests := []struct {
		name      string
		blocks    int
		batchSize int
		chunk     int
		policy    Policy
	}{
		{"roomy", 64, 64, 16, FCFS},
		{"small budget", 64, 8, 4, FCFS},
		{"sjf", 64, 16, 8, SJF},
		{"tiny cache", 9, 32, 8, FCFS},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newFake(t, tc.blocks, 4, 8)
			d.delay = 200 * time.Microsecond // keep the 8 requests overlapping, so they batch and compete for blocks
			e := start(t, d, Limits{NCtx: tc.blocks * 4, NSeqMax: 8, NBatch: 64, Vocab: vocab},
				Config{BatchSize: tc.batchSize, ChunkSize: tc.chunk, Policy: tc.policy, MaxQueue: 32})
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p := prompt(3+i*2, int32(i))
					s, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 12, Sampling: greedy()})
					if err != nil {
						t.Error(err)
						return
					}
					got, last := collect(t, s)
					if want := expected(p, 12); !slices.Equal(got, want) {
						t.Errorf("request %d: got %v, want %v (finish %s %v)", i, got, want, last.Finish, last.Err)
					}
					if last.Finish != FinishLength || last.Usage.CompletionTokens != 12 || last.Usage.PromptTokens != len(p) {
						t.Errorf("request %d: final %+v", i, last)
					}
				}()
			}
			wg.Wait()
			if m := d.maxBatch(); m > tc.batchSize {
				t.Errorf("a batch had %d tokens, budget %d", m, tc.batchSize)
			}
			if d.maxBatch() < 2 {
				t.Errorf("sequences were never batched together")
			}
			waitIdle(t, e)
		})
	}
}

// waitIdle waits until no sequence holds KV blocks.
func waitIdle(t *testing.T, e *Engine) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.Stats()
		if st.Running == 0 && st.Waiting == 0 && st.KV.Used == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestChunkedPrefillKeepsDecodersGoing(t *testing.T) {
	d := newFake(t, 64, 4, 4)
	e := start(t, d, Limits{NCtx: 256, NSeqMax: 4, NBatch: 64, Vocab: vocab}, Config{BatchSize: 6, ChunkSize: 4})
	short, err := e.Submit(context.Background(), Request{Prompt: prompt(2, 1), MaxTokens: 30, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	// Let the short request start decoding, then send a long prompt.
	ctx := context.Background()
	if _, err := short.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	long, err := e.Submit(ctx, Request{Prompt: prompt(100, 2), MaxTokens: 2, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := collect(t, short)
	if len(got) != 29 {
		t.Fatalf("short request produced %d more tokens, want 29", len(got))
	}
	collect(t, long)
	// The long prompt needs 25 chunks of 4; had it stalled the short sequence, the short one would
	// have finished after it. Every batch stayed within the budget.
	if m := d.maxBatch(); m > 6 {
		t.Fatalf("batch of %d tokens exceeds budget 6", m)
	}
}

// TestPrefillChunks checks how prompt chunks fill the step budget: one chunk per prefilling
// sequence while others decode, the whole budget when nothing decodes.
func TestPrefillChunks(t *testing.T) {
	cases := []struct {
		name        string
		decoder     bool // a sequence is already decoding when the long prompt arrives
		wantBatches []int
	}{
		// 40 prompt tokens under a budget of 16 with nothing decoding: 16, 16, 8.
		{name: "alone", wantBatches: []int{16, 16, 8}},
		// With a decoding sequence: its token plus one 4-token chunk per step (10 steps).
		{name: "beside a decoder", decoder: true, wantBatches: []int{5, 5, 5, 5, 5, 5, 5, 5, 5, 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newFake(t, 64, 4, 2)
			e := start(t, d, Limits{NCtx: 256, NSeqMax: 2, NBatch: 64, Vocab: vocab}, Config{BatchSize: 16, ChunkSize: 4})
			ctx := context.Background()
			if tc.decoder {
				d.delay = time.Millisecond // keeps the short request decoding while the long one prefills
				short, err := e.Submit(ctx, Request{Prompt: prompt(2, 1), MaxTokens: 200, Sampling: greedy()})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := short.Recv(ctx); err != nil {
					t.Fatal(err)
				}
			}
			d.mu.Lock()
			before := len(d.batches)
			d.mu.Unlock()
			long, err := e.Submit(ctx, Request{Prompt: prompt(40, 2), MaxTokens: 2, Sampling: greedy()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := long.Recv(ctx); err != nil { // the first token: the prompt is done
				t.Fatal(err)
			}
			d.mu.Lock()
			got := slices.Clone(d.batches[before:])
			d.mu.Unlock()
			// Steps of the decoder alone may run before the long request is admitted.
			for tc.decoder && len(got) > 0 && got[0] == 1 {
				got = got[1:]
			}
			if len(got) < len(tc.wantBatches) || !slices.Equal(got[:len(tc.wantBatches)], tc.wantBatches) {
				t.Fatalf("batches %v, want %v first", got, tc.wantBatches)
			}
		})
	}
}

func TestPriorityAdmittedFirst(t *testing.T) {
	d := newFake(t, 64, 4, 1)
	d.delay = time.Millisecond
	e := start(t, d, Limits{NCtx: 256, NSeqMax: 1, NBatch: 64, Vocab: vocab}, Config{MaxQueue: 8})
	ctx := context.Background()
	blocker, err := e.Submit(ctx, Request{Prompt: prompt(2, 1), MaxTokens: 20, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Recv(ctx); err != nil {
		t.Fatal(err)
	}
	low, _ := e.Submit(ctx, Request{Prompt: prompt(2, 2), MaxTokens: 2, Sampling: greedy(), Priority: PriorityLow})
	high, _ := e.Submit(ctx, Request{Prompt: prompt(2, 3), MaxTokens: 2, Sampling: greedy(), Priority: PriorityHigh})
	var order []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, s := range map[string]*Stream{"low": low, "high": high} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			collect(t, s)
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(order) != 2 || order[0] != "high" {
		t.Fatalf("finish order %v, want high first", order)
	}
}

func TestQueueFullAndPromptTooLong(t *testing.T) {
	d := newFake(t, 16, 4, 1)
	d.delay = 2 * time.Millisecond
	e := start(t, d, Limits{NCtx: 64, NSeqMax: 1, NBatch: 64, Vocab: vocab}, Config{MaxQueue: 2})
	ctx := context.Background()
	if _, err := e.Submit(ctx, Request{Prompt: prompt(64, 1), Sampling: greedy()}); !errors.Is(err, ErrPromptSize) {
		t.Fatalf("64-token prompt in a 64-cell context: err %v, want ErrPromptSize", err)
	}
	if _, err := e.Submit(ctx, Request{Prompt: nil, Sampling: greedy()}); !errors.Is(err, ErrPromptSize) {
		t.Fatalf("empty prompt: err %v", err)
	}
	var streams []*Stream
	var full bool
	for range 10 {
		s, err := e.Submit(ctx, Request{Prompt: prompt(4, 1), MaxTokens: 40, Sampling: greedy()})
		if errors.Is(err, ErrQueueFull) {
			full = true
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	if !full {
		t.Fatal("the bounded queue never answered ErrQueueFull")
	}
	for _, s := range streams {
		s.Cancel(FinishCancelled)
	}
	for _, s := range streams {
		if _, last := collect(t, s); last.Finish != FinishCancelled {
			t.Errorf("cancelled stream finished with %q", last.Finish)
		}
	}
	waitIdle(t, e)
}

func TestCancelFreesBlocks(t *testing.T) {
	d := newFake(t, 32, 4, 4)
	d.delay = time.Millisecond
	e := start(t, d, Limits{NCtx: 128, NSeqMax: 4, NBatch: 64, Vocab: vocab}, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	s, err := e.Submit(ctx, Request{Prompt: prompt(10, 1), MaxTokens: 100, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Recv(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if e.Stats().KV.Used == 0 {
		t.Fatal("a running sequence holds no blocks")
	}
	cancel() // the client went away
	_, last := collect(t, s)
	if last.Finish != FinishCancelled {
		t.Fatalf("finish %q, want cancelled", last.Finish)
	}
	waitIdle(t, e)
}

// burst submits n requests at once, each common plus two tokens of its own, checks their greedy
// outputs (3 tokens) and returns how many prompt tokens each took from the prefix cache, sorted.
func burst(t *testing.T, e *Engine, common []int32, n int) []int {
	t.Helper()
	return burstOf(t, e, n, 3, func(i int) []int32 { return append(slices.Clone(common), int32(i), int32(i+1)) })
}

// burstOf submits n requests at once, request i with the prompt promptOf(i) and maxTokens,
// checks their greedy outputs and returns how many prompt tokens each took from the prefix
// cache, sorted.
func burstOf(t *testing.T, e *Engine, n, maxTokens int, promptOf func(i int) []int32) []int {
	t.Helper()
	var wg sync.WaitGroup
	cached := make([]int, n)
	for i := range n {
		wg.Go(func() {
			p := promptOf(i)
			s, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: maxTokens, Sampling: greedy()})
			if err != nil {
				t.Error(err)
				return
			}
			got, last := collect(t, s)
			if !slices.Equal(got, expected(p, maxTokens)) {
				t.Errorf("request %d: %v", i, got)
			}
			cached[i] = last.Usage.CachedTokens
		})
	}
	wg.Wait()
	slices.Sort(cached)
	return cached
}

// TestBurstPartingMidBlock sends a burst whose prompts share 42 tokens (10 blocks of 4 and half
// of the 11th): the first request computes them, then all others are admitted in one step, each
// copying the shared cells of the 11th block from the first request's.
func TestBurstPartingMidBlock(t *testing.T) {
	d := newFake(t, 128, 4, 8)
	d.delay = time.Millisecond
	e := start(t, d, Limits{NCtx: 512, NSeqMax: 8, NBatch: 64, Vocab: vocab}, Config{BatchSize: 16, ChunkSize: 8})
	const n = 6
	cached := burst(t, e, prompt(42, 9), n)
	if want := []int{0, 42, 42, 42, 42, 42}; !slices.Equal(cached, want) {
		t.Fatalf("cached tokens %v, want %v", cached, want)
	}
	if got := e.Stats().PromptComputed; got != 44+(n-1)*2 {
		t.Fatalf("computed %d prompt tokens, want %d", got, 44+(n-1)*2)
	}
	// The followers' 2-token remainders all go into the step after the first prompt is done
	// (with the first request's decode token): one batch of 1 + 5*2 tokens.
	d.mu.Lock()
	batches := slices.Clone(d.batches)
	d.mu.Unlock()
	if !slices.Contains(batches, 1+(n-1)*2) {
		t.Fatalf("batches %v: the followers were not admitted together", batches)
	}
}

func TestPrefixCacheAcrossRequests(t *testing.T) {
	d := newFake(t, 64, 4, 2)
	e := start(t, d, Limits{NCtx: 256, NSeqMax: 2, NBatch: 64, Vocab: vocab}, Config{})
	p := prompt(30, 5)
	run := func() ([]int32, Output) {
		s, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 5, Sampling: greedy()})
		if err != nil {
			t.Fatal(err)
		}
		return collect(t, s)
	}
	first, o1 := run()
	computed := e.Stats().PromptComputed
	second, o2 := run()
	if !slices.Equal(first, second) || !slices.Equal(first, expected(p, 5)) {
		t.Fatalf("outputs differ: %v vs %v", first, second)
	}
	// 7 full blocks of 4, then the first cell of the 8th, which the first run filled with prompt
	// and generated tokens (a partial match); the last prompt token is computed for its logits.
	if o1.Usage.CachedTokens != 0 || o2.Usage.CachedTokens != 29 {
		t.Fatalf("cached tokens %d then %d, want 0 then 29", o1.Usage.CachedTokens, o2.Usage.CachedTokens)
	}
	if again := e.Stats().PromptComputed - computed; again != 1 {
		t.Fatalf("second run computed %d prompt tokens, want 1", again)
	}
}

func TestEndOfGeneration(t *testing.T) {
	d := newFake(t, 32, 4, 2)
	p := []int32{5}
	stop := expected(p, 3)[2] // the third generated token ends generation
	e := start(t, d, Limits{NCtx: 128, NSeqMax: 2, NBatch: 64, Vocab: vocab},
		Config{IsEOG: func(tok int32) bool { return tok == stop }})
	s, _ := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 10, Sampling: greedy()})
	got, last := collect(t, s)
	if len(got) != 2 || last.Finish != FinishStop || last.Usage.CompletionTokens != 3 {
		t.Fatalf("got %v, final %+v; want 2 tokens then stop", got, last)
	}
	// ignore_eos: the sampler never picks the banned token, so generation runs to MaxTokens.
	ignore := greedy()
	ignore.IgnoreTokens = []int32{stop}
	s, _ = e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 10, Sampling: ignore})
	got, last = collect(t, s)
	if len(got) != 10 || last.Finish != FinishLength || slices.Contains(got, stop) {
		t.Fatalf("ignore_eos: got %v, finish %s", got, last.Finish)
	}
}

func TestBurstWithCommonPrefixComputesItOnce(t *testing.T) {
	d := newFake(t, 128, 4, 8)
	e := start(t, d, Limits{NCtx: 512, NSeqMax: 8, NBatch: 64, Vocab: vocab}, Config{BatchSize: 16, ChunkSize: 8})
	cached := burst(t, e, prompt(40, 9), 6)
	// 6 prompts of 42 tokens: the 40 common tokens hold 10 full blocks, computed once.
	if got := e.Stats().PromptComputed; got > 40+6*2+8 {
		t.Fatalf("computed %d prompt tokens for 6 prompts sharing 40 tokens", got)
	}
	if want := []int{0, 40, 40, 40, 40, 40}; !slices.Equal(cached, want) {
		t.Fatalf("cached tokens %v, want %v", cached, want)
	}
}

// TestSubmitSeveral: the requests of one Submit share a stream, each output says which request
// it belongs to, CancelSeq stops one of them alone, and the stream ends after every final output.
// A group larger than the free queue places is refused whole.
func TestSubmitSeveral(t *testing.T) {
	d := newFake(t, 64, 4, 4)
	d.delay = 2 * time.Millisecond // the cancel must come long before request 2's 200 steps end
	e := start(t, d, Limits{NCtx: 256, NSeqMax: 4, NBatch: 64, Vocab: vocab}, Config{MaxQueue: 3})
	ps := [][]int32{prompt(5, 1), prompt(7, 2), prompt(3, 3)}
	four := slices.Repeat([]Request{{Prompt: ps[0], MaxTokens: 1, Sampling: greedy()}}, 4)
	if _, err := e.Submit(context.Background(), four...); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("4 requests with 3 queue places: %v, want ErrQueueFull", err)
	}
	reqs := make([]Request, len(ps))
	for i, p := range ps {
		reqs[i] = Request{Prompt: p, MaxTokens: 8, Sampling: greedy()}
	}
	reqs[2].MaxTokens = 200
	s, err := e.Submit(context.Background(), reqs...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := make([][]int32, len(ps))
	last := make([]Output, len(ps))
	for {
		o, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if o.Seq < 0 || o.Seq >= len(ps) || last[o.Seq].Done {
			t.Fatalf("output %+v: no such request, or after its final output", o)
		}
		if o.Done {
			last[o.Seq] = o
			continue
		}
		got[o.Seq] = append(got[o.Seq], o.Token)
		if o.Seq == 2 && len(got[2]) == 3 {
			s.CancelSeq(2, FinishStop)
		}
	}
	for i, p := range ps[:2] {
		if !slices.Equal(got[i], expected(p, 8)) || last[i].Finish != FinishLength {
			t.Errorf("request %d: %v, finish %s; want %v", i, got[i], last[i].Finish, expected(p, 8))
		}
	}
	if n := len(got[2]); n < 3 || n >= 200 || !slices.Equal(got[2], expected(ps[2], n)) || last[2].Finish != FinishStop {
		t.Errorf("cancelled request: %d tokens, finish %s", n, last[2].Finish)
	}
}
