package engine

import "math"

// AdmitReason says why a step's admission stopped (StepInfo.AdmitStop): what held the running
// set at its size.
type AdmitReason string

const (
	AdmitQueueEmpty AdmitReason = "queue_empty" // every waiting request was admitted (or none waited)
	AdmitSlots      AdmitReason = "slots"       // the running set is at MaxRunning, or no sequence id is free
	AdmitKV         AdmitReason = "kv"          // the KV cache cannot hold the next request's prompt and expected growth
	AdmitITL        AdmitReason = "itl"         // one more decoding sequence would push the modelled decode step past the target
	AdmitPrefix     AdmitReason = "prefix"      // the requests left wait for a prefix a running sequence is still computing
)

// parallelism is the running set's adaptive bound (Engine.par), owned by the Run goroutine.
//
// The bound is Config.MaxRunning (-np, an upper bound) or fewer: as many sequences as the KV
// cache holds (Limits.NCtx cells) at the mean sequence length, prompt and completion, of the
// requests that finished (recent ones weighing most). Before any finished there is no length
// to go by, and the bound is MaxRunning: what holds admission then is the KV manager's exact
// check (CanAdmit) of each request's prompt plus its expected growth, its max_tokens or else
// the sequence cap, so that requests without max_tokens on a -c sized for n sequences of
// n_ctx_seq run n at a time, llama-server's fixed partition, until lengths are known.
// With a latency target and a fitted step cost model, the bound is also at most as many
// sequences of that length as decode within Config.TargetITL, relaxed up to twice it while
// requests wait (admissionTarget, decodeBound), and within the
// bound admission stops when the model predicts that one more decoding sequence, at the
// running set's actual lengths, would take the decode step past the target (itlAllows). The KV
// manager's CanAdmit stays the exact check of blocks: the bound knows nothing of shared
// prefixes, so it errs high there, never low.
type parallelism struct {
	meanLen float64 // mean final length of finished requests (lenN of them)
	lenN    int
	bound   int         // the bound of the latest admission round
	boundBy AdmitReason // what set it: AdmitSlots (MaxRunning), AdmitKV or AdmitITL
	stop    AdmitReason // why that round stopped
	cells   float64     // KV cells the running set attends when every sequence decodes
	target  float64     // the decode-step target of the round, seconds (admissionTarget)
	over    bool        // the running set alone decodes over it (decodeOverTarget)
}

// decodeOverTarget reports (and records in e.par.over) whether the running set's decode step
// alone is modelled over the round's target: the machine cannot meet the target (the budget
// planner's floor case), and, as the planner keeps prompts moving with a floor chunk,
// admission falls back to the KV cache and -np rather than holding every new request until a
// running one ends.
func (e *Engine) decodeOverTarget() bool {
	cells := 0.0
	for _, s := range e.running {
		cells += float64(len(s.tokens))
	}
	x := features(len(e.running), 0, cells, 0)
	e.par.over = len(e.running) > 0 && e.cost.predict(x) > e.par.target-e.cost.margin(e.par.target)
	return e.par.over
}

// admissionTarget is the decode-step time admission keeps within: --target-itl, relaxed as the
// step budget is (planStep) while requests wait, up to twice the target when as many wait as
// the latest bound, so that a queue buys throughput with some latency rather than waiting
// behind a running set sized for an idle node.
func (e *Engine) admissionTarget() float64 {
	relax := 1 + min(1, float64(len(e.waiting))/float64(max(e.par.bound, 1)))
	return e.cfg.TargetITL.Seconds() * relax
}

// noteLength updates the mean sequence length with a request that ran to its end: n tokens of
// prompt and completion.
func (p *parallelism) noteLength(n int) {
	p.lenN++
	w := max(1/float64(p.lenN), 0.05) // the plain mean at first, then the latest ~20 weigh most
	p.meanLen += w * (float64(n) - p.meanLen)
}

// parallelBound is the running set's bound for this admission round and what set it: the
// upper bound (AdmitSlots), the KV cache at the mean length (AdmitKV) or the inter-token
// target at that length (AdmitITL); parallelism says how.
func (e *Engine) parallelBound() (int, AdmitReason) {
	if e.par.lenN == 0 {
		return e.cfg.MaxRunning, AdmitSlots
	}
	mean := e.par.meanLen
	bound, by := e.cfg.MaxRunning, AdmitSlots
	if kv := kvBound(e.lim.NCtx, mean); kv < bound {
		bound, by = kv, AdmitKV
	}
	if e.cfg.TargetITL > 0 && e.cost.ready() && !e.decodeOverTarget() {
		if itl := e.cost.decodeBound(e.par.target, mean); itl < bound {
			bound, by = itl, AdmitITL
		}
	}
	return bound, by
}

// kvBound is how many sequences of mean length fit in nCtx cells, at least 1.
func kvBound(nCtx int, mean float64) int {
	if mean < 1 {
		return nCtx
	}
	return max(1, int(float64(nCtx)/mean))
}

// decodeBound is the most sequences, each attending mean cells, whose decode step the model
// predicts within target less the error margin, at least 1 (whatever the model says, one
// sequence runs).
func (m *costModel) decodeBound(target, mean float64) int {
	perSeq := m.theta[1] + m.theta[3]*mean/cellScale
	room := target - m.margin(target) - m.theta[0]
	if perSeq <= 0 {
		return math.MaxInt32
	}
	return int(max(1, min(room/perSeq, math.MaxInt32)))
}

// beginAdmission starts an admission round: the bound, the stop reason until something stops
// it, and the cells the running set attends once every sequence decodes.
func (e *Engine) beginAdmission() {
	e.par.target = e.admissionTarget()
	e.par.over = false
	e.par.bound, e.par.boundBy = e.parallelBound()
	e.par.stop = AdmitQueueEmpty
	e.par.cells = 0
	for _, s := range e.running {
		e.par.cells += float64(len(s.tokens))
	}
}

// itlAllows reports whether admitting s keeps the modelled decode step, with every running
// sequence and s decoding, within the inter-token target less the model's error margin. Without
// a target, before the model is fitted, with nobody running, or for a request that has waited
// Config.MaxWait (10 s) it allows (so a lone request always runs, and none waits for ever). It is the decode step that is checked, not the step carrying s's prompt: the
// budget planner sizes prompt chunks to the time the decode tokens leave.
func (e *Engine) itlAllows(s *sequence) bool {
	if e.cfg.TargetITL <= 0 || !e.cost.ready() || len(e.running) == 0 || e.par.over {
		return true
	}
	if e.cfg.MaxWait > 0 && !s.queuedAt.IsZero() && e.now().Sub(s.queuedAt) >= e.cfg.MaxWait {
		// Waited MaxWait: admitted whatever the target says, so that long generations on a
		// machine too slow for the target cannot hold the queue indefinitely.
		return true
	}
	target := e.par.target
	x := features(len(e.running)+1, 0, e.par.cells+float64(len(s.tokens)), 0)
	return e.cost.predict(x) <= target-e.cost.margin(target)
}

// admitted records s joining the running set in this round.
func (e *Engine) admitted(s *sequence) { e.par.cells += float64(len(s.tokens)) }
