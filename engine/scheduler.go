package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"ubatch/kvcache"
	"ubatch/sample"
)

// sequence is one sequence of a request (one of its n choices, or one embedding input) as the
// scheduler tracks it. tokens holds the whole history that must be in the KV cache (prompt, then
// generated tokens); the KV manager's SeqLen(kvSeq) of them are there
// already (Engine.nKV). A sequence with more than one token to compute is prefilling; with
// exactly one, it is decoding.
type sequence struct {
	kvSeq   int32    // KV sequence id; -1 while waiting
	kvSeqs  [1]int32 // kvSeq as the one-element slice batch.Add takes
	req     Request
	ctx     context.Context
	stream  *Stream
	choice  int // index of the request in its stream (Output.Seq)
	sampler *sample.Sampler
	tokens  []int32
	nPrompt int // prompt tokens still at the start of tokens (fewer after a context shift)
	// promptTokens is the request's prompt length, for usage.
	promptTokens int
	generated    int
	cached       int // prompt tokens taken from the prefix cache at the latest admission
	chunk        int // tokens of this sequence in the current batch
	before       int // its tokens in the KV cache when the current batch was built
	shifts       int // context shifts done
	// passedOver counts the consecutive steps in which this prefilling sequence got no chunk.
	passedOver int
	embed      *embedState // an embedding request's pooling (embed.go); nil for generation

	// The sampling time account (chargeSample): whether the uncharged first sample was taken,
	// and the time and count of the samples of the current window.
	sampledOnce bool
	sampleSum   time.Duration
	sampleN     int
	done        bool // the final output was pushed

	arrival   uint64 // submission order
	submitted time.Time
	lastToken time.Time
	usage     Usage
	counted   bool // admitted at least once (queue time recorded)

	// Admission order (orderWaiting): when the request was first queued, on the engine's clock
	// (kept across preemptions), its expected cost under SJF (0: not estimated yet), and as of
	// the latest admission round its aged priority and whether it has waited past MaxWait.
	queuedAt time.Time
	cost     int
	level    Priority
	overdue  bool
	// Fair share (fair.go): the running sequences of its client as of the latest admission
	// round, when it last began to wait (queued or preempted) and was last admitted.
	held       int
	waitSince  time.Time
	admittedAt time.Time
}

// nKV is the number of s's tokens in the KV cache (0 while waiting): the manager's length of its
// sequence, which has no holes (the engine removes cells with SeqDiscard alone, which compacts).
func (e *Engine) nKV(s *sequence) int {
	if s.kvSeq < 0 {
		return 0
	}
	return e.kv.SeqLen(int(s.kvSeq))
}

// remaining is the number of s's tokens still to compute.
func (e *Engine) remaining(s *sequence) int { return len(s.tokens) - e.nKV(s) }

// before orders sequences for service: higher priority first, then earlier arrival.
func before(a, b *sequence) int {
	if a.req.Priority != b.req.Priority {
		return cmp.Compare(b.req.Priority, a.req.Priority)
	}
	return cmp.Compare(a.arrival, b.arrival)
}

// step runs one scheduling round: reap cancelled requests, admit waiting ones, build a batch under
// the token budget (preempting when the KV cache cannot hold it), decode and sample.
func (e *Engine) step() {
	began := e.now()
	e.reap()
	e.admit()
	e.admitEmbeds()
	if len(e.running) == 0 {
		return
	}
	for !e.buildBatch() {
		if !e.preemptLowest() {
			return
		}
	}
	capacity := e.capacity()
	for _, s := range e.running {
		switch {
		case e.remaining(s) <= 1: // decoding
		case s.chunk == 0:
			s.passedOver++
		default:
			s.passedOver = 0
		}
	}
	if e.b.Len() == 0 {
		return
	}
	// Before the schedule moves the lengths on: what each sequence had computed.
	for _, s := range e.running {
		s.before = e.nKV(s)
	}
	start := e.now()
	err := e.decode()
	if err != nil {
		// The batch fitted (checked above), so this is a model failure: its cells hold no K/V and
		// must never be matched, and its sequences fail.
		e.kv.ForgetCells(e.sched.Slots)
		for _, s := range e.running {
			if s.chunk > 0 {
				e.finish(s, FinishError, fmt.Errorf("decode: %w", err))
			}
		}
		e.running = slices.DeleteFunc(e.running, func(s *sequence) bool { return s.kvSeq < 0 })
		return
	}
	info := StepInfo{Tokens: e.b.Len(), Budget: e.plan.tokens, Capacity: capacity, Reason: e.plan.reason, Target: e.plan.target,
		Predicted: e.plan.predicted, Duration: e.now().Sub(start)}
	e.stats.Steps++
	row := 0
	for _, s := range e.running {
		if s.chunk == 0 {
			continue
		}
		if len(s.tokens)-s.before == 1 && s.before >= s.nPrompt {
			info.DecodeTokens++
		} else {
			info.PrefillTokens += s.chunk
			e.stats.PromptComputed += uint64(min(s.chunk, max(0, s.nPrompt-s.before)))
			if s.usage.PromptStart.IsZero() { // the first chunk; a recompute after preemption is not the prompt's
				s.usage.PromptStart = start
			}
		}
		if s.embed != nil {
			e.poolChunk(s, row)
		} else if e.nKV(s) == len(s.tokens) {
			e.emitGuarded(s, e.dec.Logits(row+s.chunk-1))
		}
		row += s.chunk
	}
	e.running = slices.DeleteFunc(e.running, func(s *sequence) bool { return s.kvSeq < 0 })
	// The whole step, scheduling and sampling included, is what a stream waits between tokens.
	info.Elapsed = e.now().Sub(began)
	e.cost.observe(e.stepX, info.Elapsed.Seconds())
	info.Running, info.Waiting = len(e.running), len(e.waiting)
	info.Bound, info.AdmitStop = e.par.bound, e.par.stop
	st := e.kv.Stats()
	info.KVUsed, info.KVTotal, info.KVCached = st.Used, st.Total, st.Cached
	if e.cfg.Observer != nil {
		e.cfg.Observer.Step(info)
	}
	e.logStep(info)
}

// capacity is StepInfo.Capacity of the batch just built, read before it is decoded (while
// remaining is still what each sequence had left): the tokens the running sequences could
// have contributed under the per-sequence chunk limit buildBatch applies, one for every free
// slot, within the step's token budget or the slots, whichever is more (buildBatch places a
// decode token per running sequence before planning the budget). Free slots count one token,
// not a prompt, so that a lone decoding client reads 1/MaxRunning and a node whose slots all
// decode reads 1 (the seeds' "how full the batch is"), whatever the prompt allowance.
func (e *Engine) capacity() int {
	n := 0
	if e.par.stop != AdmitKV && e.par.stop != AdmitITL { // else no free slot could take a request
		n = max(0, e.par.bound-len(e.running))
	}
	for _, s := range e.running {
		r := e.remaining(s)
		if e.plan.reason != BudgetNoDecode {
			r = min(r, e.cfg.ChunkSize)
		}
		n += r
	}
	return max(e.b.Len(), min(n, max(e.plan.tokens, e.par.bound)))
}

// decode schedules the batch built in e.b on the KV manager (cells, block tables and the store
// operations due, in e.sched: the check was buildBatch's CanSchedule, so this plans nothing
// again) and has the decoder run it. A panicking decoder leaves the step's cells without K/V:
// they are forgotten before the panic goes on.
func (e *Engine) decode() error {
	if err := e.kv.Schedule(&e.b, &e.sched); err != nil {
		return fmt.Errorf("engine: scheduling a batch that fitted: %w", err)
	}
	e.tierImages() // the images of the step's loads and saves from and to other tiers (tier.go)
	e.b.KV = &e.sched
	defer func() {
		if v := recover(); v != nil {
			e.kv.ForgetCells(e.sched.Slots)
			e.tierSpilled(false)
			panic(v)
		}
	}()
	err := e.dec.Decode(&e.b)
	e.tierSpilled(err == nil)
	return err
}

// logStep writes the step's budget and why at debug level.
func (e *Engine) logStep(info StepInfo) {
	if e.cfg.Logger == nil || !e.cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	e.cfg.Logger.LogAttrs(context.Background(), slog.LevelDebug, "step",
		slog.Int("tokens", info.Tokens), slog.Int("decode", info.DecodeTokens), slog.Int("prompt", info.PrefillTokens),
		slog.Int("budget", info.Budget), slog.String("reason", string(info.Reason)),
		slog.Duration("target", info.Target), slog.Duration("predicted", info.Predicted),
		slog.Duration("took", info.Elapsed), slog.Int("running", info.Running), slog.Int("waiting", info.Waiting),
		slog.Int("bound", info.Bound), slog.String("admit_stop", string(info.AdmitStop)))
}

// reap finishes requests whose client went away or that were cancelled, freeing their blocks.
func (e *Engine) reap() {
	gone := func(s *sequence) bool {
		if reason, ok := s.stream.cancelled(s.choice); ok {
			e.finish(s, reason, nil)
			return true
		}
		if s.ctx.Err() != nil {
			e.finish(s, FinishCancelled, nil)
			return true
		}
		return false
	}
	e.running = slices.DeleteFunc(e.running, gone)
	e.waiting = slices.DeleteFunc(e.waiting, func(s *sequence) bool {
		if gone(s) {
			e.queued.Add(-1)
			return true
		}
		return false
	})
}

// maxPrefillWait bounds how many consecutive steps a prefilling sequence can be passed over for
// others of its priority before its chunk comes first.
const maxPrefillWait = 4

// buildBatch packs one decode token per decoding sequence, then prompt chunks, under the step's
// budget (planStep): with a latency target and sequences decoding, each chunk gets the modelled
// time left under the target. It reports false when the KV cache cannot hold the batch: the
// step's one capacity plan (kvcache.Manager.CanSchedule, copy-on-write copies included), which
// decode's Schedule then relies on.
func (e *Engine) buildBatch() bool {
	e.b.Clear()
	budget := e.cfg.BatchSize
	slices.SortStableFunc(e.running, before)
	decode, cells := 0, 0.0
	for _, s := range e.running {
		s.chunk = 0
		s.before = e.nKV(s)
		if len(s.tokens)-s.before == 1 && budget > 0 {
			s.chunk = 1
			budget--
			decode++
			cells += float64(s.before + 1)
		}
	}
	prefill := e.inBatch[:0]
	for _, s := range e.running {
		if len(s.tokens)-s.before > 1 {
			prefill = append(prefill, s)
		}
	}
	// Priority first; within it, prompts passed over for maxPrefillWait steps go first, the
	// longest passed over first, so that a stream of short prompts cannot starve a long one
	// under SJF (or a small budget under FCFS); then the policy. prefill is in running order
	// (before) already.
	slices.SortStableFunc(prefill, func(a, b *sequence) int {
		if a.req.Priority != b.req.Priority {
			return cmp.Compare(b.req.Priority, a.req.Priority)
		}
		if a.passedOver >= maxPrefillWait || b.passedOver >= maxPrefillWait {
			if c := cmp.Compare(b.passedOver, a.passedOver); c != 0 {
				return c // the longest passed over first
			}
		}
		if e.cfg.Policy == SJF {
			return cmp.Compare(len(a.tokens)-a.before, len(b.tokens)-b.before)
		}
		return 0
	})
	firstN := 0
	if len(prefill) > 0 {
		firstN = prefill[0].before
	}
	e.plan = e.planStep(decode, cells, firstN)
	budget = e.plan.tokens - decode
	prompt, promptCells := 0, 0.0
	for i, s := range prefill {
		if budget == 0 {
			break
		}
		limit := min(len(s.tokens)-s.before, e.cfg.ChunkSize, budget)
		n := limit
		if e.plan.timed {
			n = e.cost.chunkFor(s.before, e.plan.avail, limit)
			if i == 0 && e.plan.floor && e.floorFor(s) {
				n = max(n, min(minChunk, limit))
			}
			e.plan.avail -= e.cost.promptCost(s.before, n)
		}
		s.chunk = n
		budget -= n
		prompt += n
		promptCells += chunkCells(s.before, n)
	}
	if e.plan.reason == BudgetNoDecode {
		// No stream to keep steady: the chunk limit protects nobody, so prompts take the whole
		// budget (a burst's shared system prompt is computed in a third of the steps).
		for _, s := range prefill {
			extra := min(len(s.tokens)-s.before-s.chunk, budget)
			s.chunk += extra
			budget -= extra
			prompt += extra
			promptCells += chunkCells(s.before+s.chunk-extra, extra)
		}
	}
	e.stepX = features(decode, prompt, cells, promptCells)
	e.plan.predicted = time.Duration(e.cost.predict(e.stepX) * float64(time.Second))
	e.inBatch = prefill[:0]
	// Tokens go in in running order so logits rows can be matched back in step.
	for _, s := range e.running {
		if s.embed != nil {
			e.addEmbedChunk(s)
			continue
		}
		for i := range s.chunk {
			p := s.before + i
			e.b.Add(s.tokens[p], int32(p), s.seqIDs(), p == len(s.tokens)-1)
		}
	}
	return e.b.Len() == 0 || e.kv.CanSchedule(&e.b)
}

func (s *sequence) seqIDs() []int32 {
	s.kvSeqs[0] = s.kvSeq
	return s.kvSeqs[:]
}

// preemptLowest frees the KV blocks of the running sequence of the lowest standing (byStanding: the
// priority it was admitted at, then the newest; among those of the lowest priority, one of the
// client claiming the most cells: lowestStanding) and puts it back in the waiting queue to be
// recomputed later (its full blocks stay in the prefix cache, so the recompute is often cheap).
// With a single sequence left that still does not fit, that sequence has outgrown the cache and
// ends with FinishLength. It reports whether a retry can help.
func (e *Engine) preemptLowest() bool {
	if len(e.running) == 0 {
		return false
	}
	victim := e.lowestStanding()
	if len(e.running) == 1 {
		e.running = e.running[:0]
		e.finish(victim, FinishLength, nil)
		return false
	}
	e.preemptSeq(victim)
	return true
}

// preemptSeq takes the running sequence victim out of the batch and puts it back in the waiting
// queue, freeing its KV blocks (its full blocks stay in the prefix cache) and its id.
func (e *Engine) preemptSeq(victim *sequence) {
	e.running = slices.DeleteFunc(e.running, func(s *sequence) bool { return s == victim })
	e.tierSwapOut(victim) // to disk, when reading it back beats computing it (tier.go)
	e.kv.SeqFree(int(victim.kvSeq))
	e.freeIDs = append(e.freeIDs, victim.kvSeq)
	victim.kvSeq, victim.chunk = -1, 0
	victim.cost = 0 // its history is longer now, and mostly cached: estimated again
	victim.usage.Preemptions++
	victim.waitSince = e.now() // its time slice (overdueVictim) starts again
	if victim.embed != nil {
		e.requeueEmbed(victim)
	} else {
		e.waiting = append(e.waiting, victim)
		e.queued.Add(1)
	}
	e.stats.Preemptions++
	if e.cfg.Observer != nil {
		e.cfg.Observer.Preempted()
	}
}

// emit samples the next token of s from logits, streams it and ends s when it is done. It runs
// the request's own sampler and grammar: call it through emitGuarded.
func (e *Engine) emit(s *sequence, logits []float32) {
	began := e.now()
	if e.testHook != nil {
		e.testHook("sample", &s.req)
	}
	tok := s.sampler.Sample(logits)
	// One clock pair per token: the account that keeps one request's grammar from holding every
	// other stream's step back; the second read also stamps the token for the usage timings.
	sampled := e.now()
	if err := e.chargeSample(s, sampled.Sub(began)); err != nil {
		e.finish(s, FinishError, err)
		return
	}
	if tok < 0 { // every token excluded, NaN logits or a grammar dead end: nothing can be sampled
		e.finish(s, FinishError, s.sampler.Err())
		return
	}
	s.sampler.Accept(tok)
	now := time.Now()
	out := Output{Seq: s.choice, Token: tok}
	if s.req.Logprobs {
		out.LogProb, out.Top = sample.LogProbs(logits, tok, s.req.TopLogprobs)
	}
	first := s.generated == 0
	if e.cfg.Observer != nil {
		since := now.Sub(s.lastToken)
		if first {
			since = now.Sub(s.submitted)
		}
		e.cfg.Observer.Token(first, since)
	}
	if first {
		s.usage.TimeToFirstToken = now.Sub(s.submitted)
		s.usage.FirstToken = sampled
	}
	s.usage.LastToken = sampled
	s.lastToken = now
	s.generated++
	e.stats.Generated++
	// ignore_eos bans the end-of-generation tokens in the sampler (Sampling.IgnoreTokens).
	eog := e.cfg.IsEOG(tok)
	if !eog {
		s.stream.push(out)
		s.tokens = append(s.tokens, tok)
	}
	switch {
	case eog:
		e.finish(s, FinishStop, nil)
	case s.req.MaxTokens > 0 && s.generated >= s.req.MaxTokens:
		e.finish(s, FinishLength, nil)
	case len(s.tokens) >= e.lim.NCtxSeq && e.cfg.ContextShift:
		if ok, err := e.shiftContext(s); err != nil {
			e.finish(s, FinishError, err)
		} else if !ok {
			e.finish(s, FinishLength, nil)
		}
	case len(s.tokens) >= e.lim.NCtxSeq:
		e.finish(s, FinishLength, nil)
	}
}

// shiftContext makes room in a sequence that reached the cap, as llama.cpp's --context-shift
// does: it keeps the first Keep tokens, drops the older half of the rest, positions
// [keep, keep+discard), from the KV cache and shifts the newer half down over it (keys
// re-rotated, cells compacted into whole blocks, the emptied ones released: kvcache.SeqDiscard),
// so generation goes on with a sliding history in the memory of half a sequence. It reports
// false when Keep leaves nothing to drop.
func (e *Engine) shiftContext(s *sequence) (bool, error) {
	keep := e.cfg.Keep
	if keep < 0 {
		keep = s.promptTokens
	}
	n := e.nKV(s)
	keep = min(keep, n)
	discard := (n - keep) / 2
	if discard <= 0 {
		return false, nil
	}
	if err := e.kv.SeqDiscard(int(s.kvSeq), int32(keep), int32(keep+discard)); err != nil {
		return false, err
	}
	s.tokens = append(s.tokens[:keep], s.tokens[keep+discard:]...)
	s.nPrompt = max(min(s.nPrompt, keep), s.nPrompt-discard)
	s.shifts++
	return true, nil
}

// finish ends s: frees its sequence (full blocks stay cached for reuse) and sends the final output.
func (e *Engine) finish(s *sequence, reason FinishReason, err error) {
	if s.embed != nil {
		e.finishEmbed(s, reason, err)
		return
	}
	if s.kvSeq >= 0 {
		e.tierRemember(s) // the slot's history, for slot save (slots_save.go)
		e.kv.SeqFree(int(s.kvSeq))
		e.freeIDs = append(e.freeIDs, s.kvSeq)
		s.kvSeq = -1
	}
	if errors.Is(err, kvcache.ErrKVFull) {
		reason = FinishLength
	} else if err != nil {
		reason = FinishError
	}
	s.usage.PromptTokens = s.promptTokens
	s.usage.CompletionTokens = s.generated
	s.usage.Latency = time.Since(s.submitted)
	if reason == FinishStop || reason == FinishLength {
		e.noteCompletion(s.generated)
		e.par.noteLength(s.promptTokens + s.generated)
	}
	if e.cfg.Observer != nil {
		e.cfg.Observer.Finished(reason, s.usage)
	}
	s.stream.push(Output{Seq: s.choice, Done: true, Finish: reason, Err: err, Usage: s.usage})
	s.done = true
}
