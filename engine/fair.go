package engine

import (
	"slices"
	"time"
)

// Fair share between clients. A request carries its client's identity (Request.Client: the
// server's client address, or the X-Forwarded-For client behind a trusted proxy, with the API
// key when one is sent). When a waiting request finds the slots, the KV cache or the
// inter-token target full, and no running sequence stands below its priority (makeRoom), it
// preempts a sequence of the client holding the most (slots when the slots are full, cells
// claimed when the KV cache is) if that client holds more than the waiting request's client
// will with it: the running set moves towards an equal share per client (progressive
// filling) without two clients preempting each other back and forth. Waiting requests are
// also admitted fewest-held-client first among equals (orderWaiting), so that one client's
// queued sequences cannot stand in front of another client's first. A request that has waited
// Config.MaxWait since it was queued or last preempted preempts, at its aged priority, a
// sequence of another request that has run MaxWait since its admission: a time slice, so
// that no request waits for long generations to end, nor two swap at every step.
//
// Every count is over generation sequences (embedding inputs have their own cap,
// EmbedConfig.MaxRunning, and are never a fair-share victim). Requests without a Client share
// the identity "": among them nothing changes.

// fairness is the per-client bookkeeping of one admission round (Engine.fair), owned by the
// Run goroutine; its maps are reused from round to round so that a step allocates nothing once
// they have grown to the number of clients.
type fairness struct {
	held  map[string]int // running generation sequences per client
	cells map[string]int // cells they claim: tokens and the growth set aside
}

// count refills the maps from the running set.
func (e *Engine) fairCount() {
	f := &e.fair
	if f.held == nil {
		f.held, f.cells = map[string]int{}, map[string]int{}
	}
	clear(f.held)
	clear(f.cells)
	for _, r := range e.running {
		if r.embed != nil || r.kvSeq < 0 {
			continue
		}
		f.held[r.req.Client]++
		f.cells[r.req.Client] += e.claim(r)
	}
}

// claim is the KV cells sequence s holds or has set aside: its tokens and its expected growth.
func (e *Engine) claim(s *sequence) int { return len(s.tokens) + e.expectedGrowth(s) }

// fairVictim is the running sequence a waiting s may preempt for fair share, or nil: the one
// of the lowest standing (byStanding) of the client holding the most (by cells when kv, else
// by slots), among running generation sequences of other clients admitted at no more than s's
// own priority, when that client holds more than s's will with s.
func (e *Engine) fairVictim(s *sequence, kv bool) *sequence {
	if s.embed != nil {
		return nil
	}
	e.fairCount()
	use := e.fair.held
	if kv {
		use = e.fair.cells
	}
	var victim *sequence
	for _, r := range e.running {
		if r.embed != nil || r.kvSeq < 0 || r.req.Client == s.req.Client || r.level > s.req.Priority {
			continue
		}
		switch {
		case victim == nil, use[r.req.Client] > use[victim.req.Client]:
			victim = r
		case r.req.Client == victim.req.Client && byStanding(r, victim) > 0:
			victim = r
		}
	}
	if victim == nil {
		return nil
	}
	// Only a client holding more than s's will once s is in: the victim's client could not then
	// preempt s back (it would hold less than s's client holds with s).
	need := 1
	if kv {
		need = e.claim(s)
	}
	if use[victim.req.Client] <= use[s.req.Client]+need {
		return nil
	}
	return victim
}

// overdueVictim is the running sequence a waiting s that has waited Config.MaxWait (since it
// was queued or last preempted) may preempt, or nil: of those admitted at no more than s's aged
// priority, from another request, that have run MaxWait since their admission, the one of the
// lowest standing of the client holding the most slots.
func (e *Engine) overdueVictim(s *sequence) *sequence {
	max := e.cfg.MaxWait
	if max <= 0 || s.embed != nil || s.waitSince.IsZero() {
		return nil
	}
	now := e.now()
	if now.Sub(s.waitSince) < max {
		return nil
	}
	e.fairCount()
	var victim *sequence
	for _, r := range e.running {
		if r.embed != nil || r.kvSeq < 0 || r.stream == s.stream || r.level > s.level || now.Sub(r.admittedAt) < max {
			continue
		}
		switch held := e.fair.held; {
		case victim == nil, held[r.req.Client] > held[victim.req.Client]:
			victim = r
		case held[r.req.Client] == held[victim.req.Client] && byStanding(r, victim) > 0:
			victim = r
		}
	}
	return victim
}

// heldBy stamps every waiting request with its client's running sequences (orderWaiting's
// fairness key).
func (e *Engine) heldBy() {
	e.fairCount()
	for _, s := range e.waiting {
		s.held = e.fair.held[s.req.Client]
	}
}

// lowestStanding is the running sequence preemptLowest gives up when the batch does not fit:
// of the lowest standing, but among the sequences at the lowest priority level, one of the
// client claiming the most cells, so that a client that grew past its share pays for it.
func (e *Engine) lowestStanding() *sequence {
	lowest := slices.MaxFunc(e.running, byStanding)
	e.fairCount()
	victim := lowest
	for _, r := range e.running {
		if r.level != lowest.level || r.embed != nil || r.kvSeq < 0 {
			continue
		}
		if c, v := e.fair.cells[r.req.Client], e.fair.cells[victim.req.Client]; c > v || (c == v && byStanding(r, victim) > 0) {
			victim = r
		}
	}
	return victim
}

// growthShare bounds the growth set aside for each sequence of a request of n sequences: the
// request claims at most a quarter of the KV cache for its growth (n = 1 is not bounded: one
// sequence claims up to the sequence cap, llama-server's partition).
func (e *Engine) growthShare(n int) int {
	if n <= 1 {
		return e.lim.NCtx
	}
	return max(1, e.lim.NCtx/(4*n))
}

// noteAdmitted stamps s's admission for the time slice of overdueVictim.
func (e *Engine) noteAdmitted(s *sequence, now time.Time) { s.admittedAt = now }
