package engine

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

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
	// Before the schedule moves the lengths on: what each sequence had computed.
	for _, s := range e.running {
		s.before = e.nKV(s)
	}
	if err := e.kv.Schedule(&e.b, &e.sched); err != nil {
		return fmt.Errorf("engine: scheduling a batch that fitted: %w", err)
	}
	e.images.stage(&e.sched) // the images of the step's loads and saves from and to other tiers
	e.b.KV = &e.sched
	defer func() {
		if v := recover(); v != nil {
			e.kv.ForgetCells(e.sched.Slots)
			e.images.staged(&e.sched, false)
			panic(v)
		}
	}()
	e.rec.apply() // the states' clears and loads of this step's admissions
	err := e.dec.Decode(&e.b)
	e.images.staged(&e.sched, err == nil)
	if err == nil {
		err = e.rec.advance(e.running)
	}
	return err
}

// failBatch fails the sequences of the batch the decoder refused with err: the batch fitted
// (buildBatch checked), so this is a model failure, and its cells hold no K/V and must never be
// matched.
func (e *Engine) failBatch(err error) {
	e.kv.ForgetCells(e.sched.Slots)
	for _, s := range e.running {
		if s.chunk > 0 {
			e.finish(s, FinishError, fmt.Errorf("decode: %w", err))
		}
	}
}

// notePassedOver counts, for each prefilling sequence, the steps in a row its prompt got no
// chunk (buildBatch's maxPrefillWait).
func (e *Engine) notePassedOver() {
	for _, s := range e.running {
		switch {
		case e.remaining(s) <= 1: // decoding
		case s.chunk == 0:
			s.passedOver++
		default:
			s.passedOver = 0
		}
	}
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
		limit = e.rec.chunkEnd(s, s.before+limit) - s.before // a hybrid's snapshot boundary
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
			extra = max(0, e.rec.chunkEnd(s, s.before+s.chunk+extra)-s.before-s.chunk)
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
