package engine

import (
	"context"
	"fmt"
	"slices"

	"ubatch/batch"
)

// The scheduler core: the loop's policy, in the order a step runs it. Each step reaps the
// requests that ended or were cancelled, admits waiting ones while sequence ids and KV blocks
// allow, builds a batch under the token budget (preempting the lowest standing sequence while
// the KV cache cannot hold it), decodes it, and emits a token (or pools a chunk) per sequence.
//
// The core alone writes running, waiting and the free sequence ids (start, release). What else
// a feature keeps lives in a component that owns it, called through the interfaces below: the
// KV tiers beyond RAM (tier.go), the slot histories (slots_save.go), the embedding queue
// (embed.go). The core imports no file format.

// seqMemory is per-sequence memory kept beside the KV manager's blocks. The core calls admitted
// once s holds its id and blocks, and released just before it frees them: preempted when s
// goes back to the waiting queue to be admitted again (and recomputed), else s has ended. A
// component that holds per-sequence state (a recurrent state, say) joins Engine.mem.
type seqMemory interface {
	admitted(s *sequence) error
	released(s *sequence, preempted bool)
}

// prefixFetcher is the tiers' admission side: wait reports whether waiting s must wait for
// blocks of its prefix on their way from another tier (starting the fetch at its first turn),
// fetching whether a fetch is in flight for s. Fetches end on done (nil without tiers), and
// imported takes one into the RAM prefix cache; sweep forgets ended sequences once a round.
type prefixFetcher interface {
	wait(s *sequence) bool
	fetching(s *sequence) bool
	done() <-chan fetchResult
	imported(r fetchResult)
	sweep()
}

// stepImages gives a step's store operations their images: stage after the batch is
// scheduled (kv.Ops set), staged after the decoder applied them (ok) or failed.
type stepImages interface {
	stage(kv *batch.KV)
	staged(kv *batch.KV, ok bool)
}

// Run is the step loop; it owns all scheduling state. It returns when ctx ends, after finishing
// every outstanding request with ErrClosed. Let in-flight requests drain before cancelling ctx
// for a graceful shutdown.
func (e *Engine) Run(ctx context.Context) error {
	defer close(e.stopped)
	for {
		if e.idle() {
			e.publish()
			select {
			case ss := <-e.incoming:
				e.enqueue(ss)
			case f := <-e.ctl: // slot save, restore, erase and peer exports (slots_save.go)
				f()
			case r := <-e.fetch.done(): // nil without tiers
				e.fetch.imported(r)
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			e.shutdown()
			return ctx.Err()
		}
		e.drainIncoming()
		e.drainControl()
		e.pollFetches()
		e.fetch.sweep()
		if e.idle() {
			continue
		}
		e.step()
		e.publish()
	}
}

// idle reports whether the loop has nothing to do but wait: nothing runs, no embedding waits,
// and every waiting request (if any) waits for a fetch from another tier.
func (e *Engine) idle() bool {
	if len(e.running) > 0 || len(e.embeds.waiting) > 0 {
		return false
	}
	for _, s := range e.waiting {
		if !e.fetch.fetching(s) {
			return false
		}
	}
	return true
}

func (e *Engine) enqueue(ss []*sequence) {
	if isEmbed(ss) {
		e.embeds.enqueue(ss)
		return
	}
	e.waiting = append(e.waiting, ss...)
}

// step runs one scheduling round: reap cancelled requests, admit waiting ones, build a batch under
// the token budget (preempting when the KV cache cannot hold it), decode and emit.
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
	e.notePassedOver()
	if e.b.Len() == 0 {
		return
	}
	start := e.now()
	if err := e.decode(); err != nil {
		e.failBatch(err)
		e.dropEnded()
		return
	}
	info := e.emitStep(start)
	e.dropEnded()
	e.observeStep(info, capacity, began)
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

// dropEnded removes the sequences that ended during the step from running.
func (e *Engine) dropEnded() {
	e.running = slices.DeleteFunc(e.running, func(s *sequence) bool { return s.kvSeq < 0 })
}

// admit moves waiting requests, in orderWaiting's order, into running while sequence slots and
// KV blocks allow, each from its longest cached prefix. A request whose prefix a running
// sequence is still computing waits and later ones may pass it: a burst of requests with one
// system prompt computes it once. The adaptive parallelism bounds the running set
// (parallel.go); e.par.stop records what stopped the round.
func (e *Engine) admit() {
	e.orderWaiting()
	e.beginAdmission()
	for i := 0; i < len(e.waiting); {
		s := e.waiting[i]
		growth := e.expectedGrowth(s)
		a := e.kv.CanAdmit(s.req.Salt, s.tokens, growth)
		if a.Wait {
			e.par.stop = AdmitPrefix
			i++
			continue
		}
		slot := len(e.running) < e.par.bound && len(e.freeIDs) > 0
		if !slot || (!a.Fits() && len(e.running) > 0) {
			// Full: a running request of lower priority makes room, or s waits (and so does
			// everyone behind it, to keep the order).
			if e.makeRoom(s, slot) {
				continue
			}
			e.par.stop = e.fullReason(slot)
			return
		}
		if !e.itlAllows(s) {
			// One more stream would slow every stream past the target: s waits (a preemption
			// of a lower priority would not help, the running set would stay as large), unless
			// a client holds more than its share: one of its sequences gives s its place.
			if v := e.fairVictim(s, false); v != nil {
				e.preemptSeq(v)
				continue
			}
			e.par.stop = AdmitITL
			return
		}
		if e.fetch.wait(s) { // blocks of its prefix are on their way from another tier
			i++
			continue
		}
		e.waiting = slices.Delete(e.waiting, i, i+1)
		e.queued.Add(-1)
		if n, ok := e.start(s, growth, true); ok {
			e.admittedGen(s, n)
		}
	}
}

// start gives waiting s (out of its queue) a sequence id, its blocks (attach: from the longest
// cached prefix, growth cells set aside) and the memory components' state, and puts it in
// running. It returns the cached tokens, or false when s ended with a refusal.
func (e *Engine) start(s *sequence, growth int, attach bool) (int, bool) {
	id := e.freeIDs[len(e.freeIDs)-1]
	e.freeIDs = e.freeIDs[:len(e.freeIDs)-1]
	s.kvSeq, s.cached = id, 0
	n, err := 0, error(nil)
	if attach {
		n, err = e.kv.Admit(int(id), s.req.Salt, s.tokens, growth)
	}
	for i, m := range e.mem {
		if err != nil {
			break
		}
		if err = m.admitted(s); err != nil {
			for _, held := range e.mem[:i] { // the components that took s give it up
				held.released(s, false)
			}
		}
	}
	if err != nil {
		e.kv.SeqFree(int(id))
		e.freeIDs = append(e.freeIDs, id)
		s.kvSeq = -1
		e.finish(s, FinishError, fmt.Errorf("engine: admitting a request: %w", err))
		return 0, false
	}
	s.cached = n
	e.running = append(e.running, s)
	return n, true
}

// initIDs makes the sequence ids [0, n) free, a stack handing out the lowest first.
func (e *Engine) initIDs(n int) {
	for id := n - 1; id >= 0; id-- {
		e.freeIDs = append(e.freeIDs, int32(id))
	}
}

// release frees s's id, its blocks (full ones stay in the prefix cache) and the memory
// components' state (preempted: s will be admitted again).
func (e *Engine) release(s *sequence, preempted bool) {
	if s.kvSeq < 0 {
		return
	}
	for _, m := range e.mem {
		m.released(s, preempted)
	}
	e.kv.SeqFree(int(s.kvSeq))
	e.freeIDs = append(e.freeIDs, s.kvSeq)
	s.kvSeq = -1
}

// preemptLowest preempts the running sequence of the lowest standing (lowestStanding), to be
// recomputed later (its full blocks stay in the prefix cache, so that is often cheap). A single
// sequence left that still does not fit has outgrown the cache: it ends with FinishLength. It
// reports whether a retry can help.
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

// preemptSeq takes the running sequence victim out of the batch and puts it back in its waiting
// queue, freeing its KV blocks (its full blocks stay in the prefix cache) and its id.
func (e *Engine) preemptSeq(victim *sequence) {
	e.running = slices.DeleteFunc(e.running, func(s *sequence) bool { return s == victim })
	e.release(victim, true)
	victim.chunk = 0
	victim.cost = 0 // its history is longer now, and mostly cached: estimated again
	victim.usage.Preemptions++
	victim.waitSince = e.now() // its time slice (overdueVictim) starts again
	if victim.embed != nil {
		e.embeds.requeue(victim)
	} else {
		e.waiting = append(e.waiting, victim)
		e.queued.Add(1)
	}
	e.stats.Preemptions++
	if e.cfg.Observer != nil {
		e.cfg.Observer.Preempted()
	}
}

// finish ends s: frees its sequence (full blocks stay cached for reuse) and sends the final output.
func (e *Engine) finish(s *sequence, reason FinishReason, err error) {
	e.release(s, false)
	if s.embed != nil {
		e.finishEmbed(s, reason, err)
		return
	}
	e.finishGen(s, reason, err)
}

func (e *Engine) shutdown() {
	e.sendMu.Lock() // waits for Submits between their closed check and their send
	e.closed.Store(true)
	e.sendMu.Unlock()
	e.drainIncoming()
	for _, s := range e.running {
		e.finish(s, FinishError, ErrClosed)
	}
	for _, s := range e.waiting {
		e.queued.Add(-1)
		e.finish(s, FinishError, ErrClosed)
	}
	e.shutdownEmbeds()
	e.running, e.waiting = nil, nil
	e.tier.flush() // the prefix cache to disk, to survive the restart (tier.go)
	e.publish()
}
