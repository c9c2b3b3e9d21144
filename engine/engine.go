package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/recstate"
	"ubatch/sample"
)

// Decoder is the model side of the engine: runner.Runtime implements it. Tests use fakes, so
// scheduling is tested without a model.
type Decoder interface {
	// Decode runs batch b with its KV schedule b.KV (the cells of its tokens, the block tables
	// and the store operations due, which it applies first): it owns the K/V memory, the engine
	// the bookkeeping.
	Decode(b *batch.Batch) error
	Logits(i int) []float32 // logits of batch token i from the last Decode
	// KVConfig describes the K/V memory the decoder holds; the engine makes its KV manager
	// from it.
	KVConfig() kvcache.Config
}

// kvOwner is what the scheduler asks of its KV manager (*kvcache.Manager, made by New and
// owned by the engine alone): the manager does all the block arithmetic of admission, prefix
// sharing and batch capacity, and keeps the sequences' lengths.
type kvOwner interface {
	CanAdmit(salt kvcache.Salt, prompt []int32, reserve int) kvcache.Admission
	Admit(seq int, salt kvcache.Salt, prompt []int32, reserve int) (int, error)
	CanSchedule(b *batch.Batch) bool
	Schedule(b *batch.Batch, kv *batch.KV) error
	ForgetCells(cells []int32)
	SeqLen(seq int) int
	SeqFree(seq int)
	SeqDiscard(seq int, p0, p1 int32) error
	Stats() kvcache.Stats
}

// Limits are the decoder's sizes the scheduler must respect.
type Limits struct {
	NCtx int // KV cells in total
	// NCtxSeq is the longest sequence, prompt and generated tokens together (llama.cpp's
	// n_ctx_seq): the model's training context, say. 0 = NCtx; at most NCtx.
	NCtxSeq int
	NSeqMax int // sequence ids in [0, NSeqMax)
	NBatch  int // most tokens per Decode
	Vocab   int
}

// Stats is a snapshot of the scheduler, published after every step.
type Stats struct {
	Running, Waiting int
	// Bound is the running set's bound as of the latest admission (at most Config.MaxRunning:
	// parallelism), AdmitStop why that admission stopped.
	Bound          int
	AdmitStop      AdmitReason
	KV             kvcache.Stats
	States         recstate.Stats // a hybrid model's recurrent-state snapshots (zero for others)
	Steps          uint64
	Preemptions    uint64
	PromptComputed uint64 // prompt tokens run through the model
	PromptCached   uint64 // prompt tokens taken from the prefix cache
	Generated      uint64
}

// Engine is the continuous-batching scheduler. Create it with New, start Run in its own goroutine,
// then Submit requests from any goroutine.
type Engine struct {
	dec      Decoder
	kv       kvOwner
	lim      Limits
	cfg      Config
	incoming chan []*sequence // the requests of one Submit each
	queued   atomic.Int64     // requests submitted but not yet admitted
	closed   atomic.Bool
	// sendMu orders Submit's send after its closed check against shutdown setting closed (read
	// locked by Submit, write locked by shutdown), so that every request sent to incoming is
	// either received by Run or drained by shutdown, never left there unanswered.
	sendMu   sync.RWMutex
	arrivals atomic.Uint64

	// Owned by the Run goroutine.
	waiting []*sequence
	running []*sequence // written by the core alone (core.go), as are waiting and freeIDs
	freeIDs []int32
	embeds  embedQueue // embedding requests waiting (embed.go)
	b       batch.Batch
	sched   batch.KV    // b's KV schedule (cells, tables, store operations), reused
	inBatch []*sequence // sequences with a logits row in b, by row order
	stats   Stats
	cost    costModel
	// The components (core.go): the KV tiers beyond RAM (tier.go), the slots' histories
	// (slots_save.go), the recurrent states of a hybrid model (hybrid.go), and the per-sequence
	// memory beside the KV blocks, [tier, saved] and rec when set.
	tier   *tierState
	fetch  prefixFetcher // tier
	images stepImages    // tier
	saved  *slotHistories
	rec    *recurrentStates // a hybrid model's recurrent states (hybrid.go); nil for others
	mem    []seqMemory
	ctl    chan func() // control calls run between steps (Engine.control)
	// completionMean is the mean completion length of the finishedN requests that ran to
	// their end, recent ones weighing most (expectedGrowth).
	completionMean float64
	finishedN      int
	par            parallelism      // the running set's adaptive bound (parallel.go)
	fair           fairness         // per-client counts of an admission round (fair.go)
	plan           stepPlan         // the budget of the batch in b
	stepX          [nFeat]float64   // the cost-model features of the batch in b
	now            func() time.Time // the clock steps and samples are timed with (tests give a fake one)
	panics         PanicObserver    // cfg.Observer, when it counts panics
	// testHook, when set (by tests, before Run), runs where the request's own code runs: before
	// making its sampler ("submit", on the caller's goroutine) and before every Sample ("sample",
	// inside its timing), so that tests can make it panic or take time.
	testHook func(where string, r *Request)

	mu        sync.Mutex
	published Stats
	slots     []Slot // every slot as of the last step, by ID, reused
	stopped   chan struct{}
}

// Slot is what one sequence id is doing, for llama-server's /slots. An idle slot (Running
// false) has its ID alone set.
type Slot struct {
	ID           int32 // KV sequence id
	Running      bool
	Task         uint64        // the request's submission number (llama-server's id_task)
	Sampling     sample.Params // the request's; its slices, map and grammar are shared: read only
	Priority     Priority
	PromptTokens int
	CachedTokens int // prompt tokens taken from the prefix cache
	Processed    int // prompt and generated tokens in the KV cache
	Generated    int
	MaxTokens    int // 0: until end of generation or the sequence cap
	Prefilling   bool
	Since        time.Duration // since submission
}

// New makes an engine over d. It does not start it: call Run.
func New(d Decoder, lim Limits, cfg Config) (*Engine, error) {
	if lim.NCtx <= 0 || lim.NSeqMax <= 0 || lim.NBatch <= 0 || lim.Vocab <= 0 || lim.NCtxSeq < 0 {
		return nil, fmt.Errorf("engine: bad limits %+v", lim)
	}
	sd, hybrid := d.(stateDecoder)
	hybrid = hybrid && sd.Recurrent()
	if r, ok := d.(interface{ Recurrent() bool }); ok && r.Recurrent() && !hybrid {
		return nil, errRecurrentOps
	}
	if hybrid && cfg.ContextShift {
		return nil, ErrRecurrentShift
	}
	if lim.NCtxSeq == 0 || lim.NCtxSeq > lim.NCtx {
		lim.NCtxSeq = lim.NCtx
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	cfg.BatchSize = min(cfg.BatchSize, lim.NBatch)
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 256
	}
	if cfg.MaxRunning <= 0 || cfg.MaxRunning > lim.NSeqMax {
		cfg.MaxRunning = lim.NSeqMax
	}
	cfg.MaxRunning = min(cfg.MaxRunning, cfg.BatchSize)
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 64
	}
	switch cfg.Policy {
	case "":
		cfg.Policy = FCFS
	case FCFS, SJF:
	default:
		return nil, fmt.Errorf("engine: unknown policy %q (use fcfs or sjf)", cfg.Policy)
	}
	cfg.agingDefaults()
	cfg.Embed.defaults(cfg.MaxRunning)
	if cfg.IsEOG == nil {
		cfg.IsEOG = func(int32) bool { return false }
	}
	if cfg.TargetITL < 0 {
		return nil, fmt.Errorf("engine: negative inter-token target %v", cfg.TargetITL)
	}
	if cfg.MaxSampleTime == 0 {
		cfg.MaxSampleTime = defaultSampleTime(cfg.TargetITL)
	}
	kv, err := kvcache.NewManager(d.KVConfig())
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Engine{dec: d, kv: kv, lim: lim, cfg: cfg, stopped: make(chan struct{}), now: time.Now, ctl: make(chan func(), 16)}
	e.tier = &tierState{}
	e.fetch, e.images = e.tier, e.tier
	e.saved = &slotHistories{last: map[int]slotHistory{}}
	e.mem = []seqMemory{e.tier, e.saved}
	if hybrid {
		rs, hk, err := newRecurrent(sd, kv, lim.NSeqMax, cfg.StateCacheBytes)
		if err != nil {
			return nil, err
		}
		e.rec, e.kv = rs, hk
		e.mem = append(e.mem, rs)
	}
	e.embeds.bs = kv.Config().BlockSize
	e.panics, _ = cfg.Observer.(PanicObserver)
	// queued and embeds.queued bound it: each send holds >= 1 request.
	e.incoming = make(chan []*sequence, cfg.MaxQueue+cfg.Embed.MaxQueue)
	e.initIDs(lim.NSeqMax)
	e.par.bound, e.par.stop = cfg.MaxRunning, AdmitQueueEmpty
	e.publish()
	return e, nil
}

// Config returns the effective configuration.
func (e *Engine) Config() Config { return e.cfg }

// Limits returns the effective limits (NCtxSeq defaulted).
func (e *Engine) Limits() Limits { return e.lim }

// Accepting reports whether Submit would queue one more request now: the engine is not shut
// down and a waiting place is free (fewer than MaxQueue requests wait). It is a snapshot for
// readiness probes; Submit still decides.
func (e *Engine) Accepting() bool {
	return !e.closed.Load() && e.queued.Load() < int64(e.cfg.MaxQueue)
}

// Submit queues one request, or several that share one Stream (the n completions of one API
// request: Output.Seq is the index in reqs). It fails at once, queueing none of them, with
// ErrQueueFull when fewer than len(reqs) of MaxQueue waiting places are free, ErrPromptSize when
// a prompt leaves no room in a sequence (Limits.NCtxSeq) for a generated token, ErrClosed after
// shutdown. Cancelling ctx (the client went away) cancels every request of the stream.
func (e *Engine) Submit(ctx context.Context, reqs ...Request) (*Stream, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%w: no request", ErrPromptSize)
	}
	st, seqs, err := newSeqs(reqs, func(req Request, st *Stream, i int) (*sequence, error) { return e.newSeq(ctx, req, st, i) })
	if err != nil {
		return nil, err
	}
	var rejected func()
	if e.cfg.Observer != nil {
		rejected = e.cfg.Observer.Rejected
	}
	if err := e.send(seqs, &e.queued, e.cfg.MaxQueue, rejected); err != nil {
		return nil, err
	}
	return st, nil
}

// newSeqs makes the sequences of a submission's requests, which share one stream: mk checks
// request i and makes its sequence. It fails with the first request's error.
func newSeqs[R any](reqs []R, mk func(req R, st *Stream, i int) (*sequence, error)) (*Stream, []*sequence, error) {
	st := newStream(len(reqs))
	seqs := make([]*sequence, len(reqs))
	for i, req := range reqs {
		s, err := mk(req, st, i)
		if err != nil {
			return nil, nil, err
		}
		seqs[i] = s
	}
	return st, seqs, nil
}

// send queues a submission's sequences to Run, counted in queued against limit (ErrQueueFull
// past it, rejected told then if set), unless the engine shut down (ErrClosed).
func (e *Engine) send(seqs []*sequence, queued *atomic.Int64, limit int, rejected func()) error {
	n := int64(len(seqs))
	if queued.Add(n) > int64(limit) {
		queued.Add(-n)
		if rejected != nil {
			rejected()
		}
		return ErrQueueFull
	}
	e.sendMu.RLock()
	defer e.sendMu.RUnlock()
	if e.closed.Load() { // shut down since the caller's check: shutdown may have drained incoming
		queued.Add(-n)
		return ErrClosed
	}
	select {
	case e.incoming <- seqs: // its capacity counts Config.MaxQueue and EmbedConfig.MaxQueue sends
		return nil
	default: // unreachable while the queued counts bound the channel, but never block a handler
		queued.Add(-n)
		return ErrQueueFull
	}
}

// newSeq checks req and makes its scheduler state, request seq of stream st.
func (e *Engine) newSeq(ctx context.Context, req Request, st *Stream, seq int) (*sequence, error) {
	if len(req.Prompt) == 0 {
		return nil, fmt.Errorf("%w: empty prompt", ErrPromptSize)
	}
	if len(req.Prompt) >= e.lim.NCtxSeq {
		return nil, fmt.Errorf("%w: %d prompt tokens, but a sequence holds at most %d (n_ctx_seq) with the tokens it generates",
			ErrPromptSize, len(req.Prompt), e.lim.NCtxSeq)
	}
	for _, t := range req.Prompt {
		if t < 0 || int(t) >= e.lim.Vocab {
			return nil, fmt.Errorf("engine: prompt token %d is outside the vocabulary (%d)", t, e.lim.Vocab)
		}
	}
	smp, err := e.newSampler(req)
	if err != nil {
		return nil, err
	}
	return &sequence{
		kvSeq: -1, req: req, ctx: ctx, stream: st, choice: seq, sampler: smp,
		tokens: append([]int32(nil), req.Prompt...), nPrompt: len(req.Prompt), promptTokens: len(req.Prompt),
		submitted: time.Now(), arrival: e.arrivals.Add(1),
	}, nil
}

// Stats returns the snapshot published after the latest step.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.published
}

func (e *Engine) publish() {
	e.stats.Running, e.stats.Waiting = len(e.running), len(e.waiting)+len(e.incoming)
	e.stats.KV = e.kv.Stats()
	if e.rec != nil {
		e.stats.States = e.rec.rec.Stats()
	}
	e.stats.Bound, e.stats.AdmitStop = e.par.bound, e.par.stop
	now := time.Now()
	e.mu.Lock()
	e.published = e.stats
	// Slots [0, MaxRunning) as llama-server lists its n_parallel, idle ones too; the ids handed
	// out stay below MaxRunning (freeIDs is a stack of the lowest first), but a running id past
	// it would still be shown.
	e.slots = e.slots[:0]
	for id := range e.cfg.MaxRunning {
		e.slots = append(e.slots, Slot{ID: int32(id)})
	}
	for _, s := range e.running {
		if s.kvSeq < 0 { // finished, not yet removed from running
			continue
		}
		for int(s.kvSeq) >= len(e.slots) {
			e.slots = append(e.slots, Slot{ID: int32(len(e.slots))})
		}
		e.slots[s.kvSeq] = Slot{ID: s.kvSeq, Running: true, Task: s.arrival, Sampling: s.req.Sampling, Priority: s.req.Priority,
			PromptTokens: s.promptTokens, CachedTokens: s.cached, Processed: e.nKV(s), Generated: s.generated,
			MaxTokens: s.req.MaxTokens, Prefilling: e.nKV(s) < s.nPrompt, Since: now.Sub(s.submitted)}
	}
	e.mu.Unlock()
}

// Slots returns what every slot was doing after the last step, by ID: at least MaxRunning of them.
func (e *Engine) Slots() []Slot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.slots)
}

// Done is closed when Run has returned.
func (e *Engine) Done() <-chan struct{} { return e.stopped }

// drainIncoming enqueues every submission waiting in e.incoming, without blocking.
func (e *Engine) drainIncoming() {
	for {
		select {
		case ss := <-e.incoming:
			e.enqueue(ss)
		default:
			return
		}
	}
}

// drainControl runs the control calls queued, without blocking.
func (e *Engine) drainControl() {
	for {
		select {
		case f := <-e.ctl:
			f()
		default:
			return
		}
	}
}

// pollFetches takes in the fetches that finished, without blocking.
func (e *Engine) pollFetches() {
	for {
		select {
		case r := <-e.fetch.done():
			e.fetch.imported(r)
		default:
			return
		}
	}
}
