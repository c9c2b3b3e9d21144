package engine

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// fullReason is why admission stopped at a request that found the running set or the KV
// cache full (slot: a sequence id and a place in the bound were free).
func (e *Engine) fullReason(slot bool) AdmitReason {
	switch {
	case slot:
		return AdmitKV
	case len(e.running) >= e.par.bound:
		return e.par.boundBy
	}
	return AdmitSlots // no sequence id free (a finished one not yet reaped)
}

// admittedGen records generation request s's admission with n tokens from the prefix cache.
func (e *Engine) admittedGen(s *sequence, n int) {
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
	e.admitted(s)
	e.noteAdmitted(s, e.now())
}

// makeRoom preempts the running sequence of the lowest standing (byStanding) if that is below
// s's own priority; else, for fair share, a sequence of a client holding more than s's
// (fairVictim, by cells when the KV cache is full: kv, else by slots); else, when s has waited
// Config.MaxWait, a sequence that has run as long (overdueVictim). It reports whether it
// preempted one. s's aging never counts: aging bounds a wait for
// a slot, while preempting throws computed KV away, and a long-waiting request would evict
// fresh ones of higher priority. The victim's aging does: a request admitted thanks to its age
// stands at its aged priority, or the next fresh request above its own priority would preempt
// it at once, again at each readmission (it keeps its age), and aging would bound nothing.
func (e *Engine) makeRoom(s *sequence, kv bool) bool {
	if len(e.running) == 0 {
		return false
	}
	victim := slices.MaxFunc(e.running, byStanding)
	if victim.level >= s.req.Priority {
		if victim = e.fairVictim(s, kv); victim == nil {
			victim = e.overdueVictim(s)
		}
		if victim == nil {
			return false
		}
	}
	e.preemptSeq(victim)
	return true
}

// byStanding orders running sequences for preemption, the last one first: by the priority they
// were admitted at (level, aged while waiting; never below their own), then arrival.
func byStanding(a, b *sequence) int {
	if a.level != b.level {
		return cmp.Compare(b.level, a.level)
	}
	return cmp.Compare(a.arrival, b.arrival)
}

// expectedGrowth is how many more tokens s is expected to generate: what its MaxTokens and the
// context leave, but no more than growthFactor times the mean completion of the requests
// finished so far (none yet: the limit itself), and for a request of n > 1 sequences no more
// than its share of a quarter of the KV cache (growthShare). Admission sets this much KV aside for every
// running sequence, so a pool much smaller than the admitted work does not thrash.
func (e *Engine) expectedGrowth(s *sequence) int {
	left := e.lim.NCtxSeq - len(s.tokens)
	if s.req.MaxTokens > 0 {
		left = min(left, s.req.MaxTokens-s.generated)
	}
	if e.finishedN > 0 {
		left = min(left, int(math.Ceil(growthFactor*e.completionMean)))
	}
	left = min(left, e.growthShare(len(s.stream.seqs)))
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

// The waiting queue's aging defaults (Config.MaxWait, Config.PriorityAging).
const (
	defaultMaxWait       = 10 * time.Second
	defaultPriorityAging = 5 * time.Second
)

// agingDefaults fills in Config's zero MaxWait and PriorityAging.
func (c *Config) agingDefaults() {
	if c.MaxWait == 0 {
		c.MaxWait = defaultMaxWait
	}
	if c.PriorityAging == 0 {
		c.PriorityAging = defaultPriorityAging
	}
}

// orderWaiting sorts the waiting queue for admission, in place (nothing is allocated): by aged
// priority (agedPriority), then, among equals, requests that have waited MaxWait or more in
// arrival order, then those whose client holds the fewest running sequences (fair.go), then
// under SJF the cheapest expected cost first (admissionCost), then arrival.
// It stamps a request's queue time the first time it sees it, on the engine's clock, and keeps
// it across preemptions, so a preempted request keeps the age it had.
func (e *Engine) orderWaiting() {
	if len(e.waiting) == 0 {
		return
	}
	now := e.now()
	sjf := e.cfg.Policy == SJF
	e.heldBy()
	for _, s := range e.waiting {
		if s.queuedAt.IsZero() {
			s.queuedAt, s.waitSince = now, now
		}
		wait := now.Sub(s.queuedAt)
		s.level = e.agedPriority(s.req.Priority, wait)
		s.overdue = sjf && e.cfg.MaxWait > 0 && wait >= e.cfg.MaxWait
		if sjf && s.cost == 0 {
			s.cost = e.admissionCost(s)
		}
	}
	slices.SortStableFunc(e.waiting, admitBefore)
}

// admitBefore is orderWaiting's order, over the fields it set. Under FCFS cost is 0 and overdue
// false: aged priority, then arrival.
func admitBefore(a, b *sequence) int {
	if a.level != b.level {
		return cmp.Compare(b.level, a.level)
	}
	if a.overdue != b.overdue {
		if a.overdue {
			return -1
		}
		return 1
	}
	if a.held != b.held {
		return cmp.Compare(a.held, b.held) // the client holding fewer sequences first (fair.go)
	}
	if !a.overdue && a.cost != b.cost {
		return cmp.Compare(a.cost, b.cost)
	}
	return cmp.Compare(a.arrival, b.arrival)
}

// agedPriority is priority p after waiting wait: one level more per PriorityAging waited, up to
// PriorityHigh (a request above it, which only API-key holders may ask for, keeps its own), so
// that a flood of high-priority requests cannot hold a lower one back for more than
// (PriorityHigh-p)·PriorityAging before it competes with them as their equal, and by age.
func (e *Engine) agedPriority(p Priority, wait time.Duration) Priority {
	if e.cfg.PriorityAging <= 0 || p >= PriorityHigh {
		return p
	}
	return Priority(min(int64(p)+int64(wait/e.cfg.PriorityAging), int64(PriorityHigh)))
}

// admissionCost is what SJF expects waiting request s to cost, in tokens, when it is first seen
// (it is kept while s waits; a preemption clears it): its prompt tokens the KV cache does not
// hold now, plus the tokens it may generate, its max_tokens left (or, with none, the engine's
// expected growth: 1.5x the mean completion). Always at least 2, so 0 means not estimated.
func (e *Engine) admissionCost(s *sequence) int {
	growth := e.lim.NCtxSeq - len(s.tokens)
	if s.req.MaxTokens > 0 {
		growth = min(growth, s.req.MaxTokens-s.generated)
	} else {
		growth = e.expectedGrowth(s)
	}
	a := e.kv.CanAdmit(s.req.Salt, s.tokens, growth)
	return max(len(s.tokens)-a.Cached, 1) + max(growth, 1)
}
