package engine

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// admit moves waiting requests (priority, then arrival order) into running while sequence slots
// and KV blocks allow, starting each from its longest cached prefix. A request whose prefix a
// running sequence is still computing waits (the KV cache says so) and later ones may pass it:
// this is what makes a burst of requests with one system prompt compute that prompt once.
func (e *Engine) admit() {
	slices.SortStableFunc(e.waiting, before)
	for i := 0; i < len(e.waiting); {
		s := e.waiting[i]
		growth := e.expectedGrowth(s)
		a := e.kv.CanAdmit(s.tokens, growth)
		if a.Wait {
			i++
			continue
		}
		slot := len(e.running) < e.cfg.MaxRunning && len(e.freeIDs) > 0
		if !slot || (!a.Fits() && len(e.running) > 0) {
			// Full: a running request of lower priority makes room, or s waits (and so does
			// everyone behind it, to keep the order).
			if e.makeRoom(s) {
				continue
			}
			return
		}
		id := e.freeIDs[len(e.freeIDs)-1]
		e.freeIDs = e.freeIDs[:len(e.freeIDs)-1]
		e.waiting = slices.Delete(e.waiting, i, i+1)
		e.queued.Add(-1)
		n, err := e.kv.Admit(int(id), s.tokens, growth)
		if err != nil {
			// The cache refused an id the scheduler believed free: a bug, reported to the client
			// rather than hidden behind a recompute.
			e.kv.SeqFree(int(id))
			e.freeIDs = append(e.freeIDs, id)
			e.finish(s, FinishError, fmt.Errorf("engine: admitting a request: %w", err))
			continue
		}
		s.id, s.cached = id, n
		e.stats.PromptCached += uint64(min(n, s.nPrompt))
		if e.cfg.Observer != nil {
			e.cfg.Observer.Lookup(len(s.tokens), n)
		}
		if !s.counted {
			s.counted = true
			s.usage.QueueTime = time.Since(s.submitted)
			s.usage.CachedTokens = min(n, s.nPrompt)
			if e.cfg.Observer != nil {
				e.cfg.Observer.Admitted(s.usage.QueueTime, s.nPrompt, s.usage.CachedTokens)
			}
		}
		e.running = append(e.running, s)
	}
}

// makeRoom preempts the lowest-priority, newest running sequence if its priority is below s's,
// and reports whether it did.
func (e *Engine) makeRoom(s *seqState) bool {
	if len(e.running) == 0 {
		return false
	}
	victim := slices.MaxFunc(e.running, before)
	if victim.req.Priority >= s.req.Priority {
		return false
	}
	e.evict(victim)
	return true
}

// expectedGrowth is how many more tokens s is expected to generate: what its MaxTokens and the
// context leave, but no more than growthFactor times the mean completion of the requests
// finished so far (none yet: the limit itself). Admission sets this much KV aside for every
// running sequence, so a pool much smaller than the admitted work does not thrash.
func (e *Engine) expectedGrowth(s *seqState) int {
	left := e.lim.NCtxSeq - len(s.tokens)
	if s.req.MaxTokens > 0 {
		left = min(left, s.req.MaxTokens-s.generated)
	}
	if e.finishedN > 0 {
		left = min(left, int(math.Ceil(growthFactor*e.completionMean)))
	}
	return max(left, 1)
}

// growthFactor sizes the growth set aside for a running sequence past the mean completion, so
// that most requests finish within it.
const growthFactor = 1.5

// noteCompletion updates the mean completion length with a request that ran to its end.
func (e *Engine) noteCompletion(n int) {
	e.finishedN++
	w := max(1/float64(e.finishedN), 0.05) // the plain mean at first, then the latest ~20 weigh most
	e.completionMean += w * (float64(n) - e.completionMean)
}
