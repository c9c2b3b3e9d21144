package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"ubatch/sample"
)

// PanicError is the error of a request that the engine ended because serving it panicked: a
// bug, in the sampler or a grammar most likely, since that is the code a request's own
// parameters drive. The engine logs the panic with its stack and ID at error level and goes on
// serving the other requests; the client sees only the ID to report.
type PanicError struct {
	ID    string // also in the log record with the stack
	Where string // what was running: "sample" (sampling and streaming a token), "submit" (making the sampler)
	Value any    // what was panicked with
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("internal error %s: please report it", e.ID)
}

// PanicObserver is implemented by an Observer that counts recovered panics. Panicked may be
// called from the engine's goroutine or (for a panic in Submit) a caller's, and must not block.
type PanicObserver interface {
	Panicked()
}

// NewErrorID returns a short random hex ID that ties an error a client sees to its log record.
func NewErrorID() string { return fmt.Sprintf("%08x", rand.Uint32()) }

// recovered turns a panic recovered while serving one request into its error: logged with the
// stack (the deferred call that recovered runs on top of the panicking frames, so debug.Stack
// shows them), counted, and returned for the request's final output.
func (e *Engine) recovered(where string, v any) *PanicError {
	pe := &PanicError{ID: NewErrorID(), Where: where, Value: v}
	log := e.cfg.Logger
	if log == nil {
		log = slog.Default() // a panic is always worth a record, even without the step log
	}
	log.Error("panic serving a request", "error_id", pe.ID, "where", where, "panic", fmt.Sprint(v),
		"stack", string(debug.Stack()))
	if e.panics != nil {
		e.panics.Panicked()
	}
	return pe
}

// emitGuarded is emit that survives a panic in the request's own code (its sampler, its grammar,
// its log-probabilities): the panic ends s alone with a *PanicError, its KV blocks freed, and the
// step goes on with the other sequences, whose state emit never touches. A request already
// ended when the panic came is left as it was.
func (e *Engine) emitGuarded(s *sequence, logits []float32) {
	defer func() {
		if v := recover(); v != nil {
			pe := e.recovered("sample", v)
			if !s.done {
				e.finish(s, FinishError, pe)
			}
		}
	}()
	e.emit(s, logits)
}

// newSampler is sample.New for a request, then its prompt accepted, with a panic in them (a
// grammar whose matcher cannot start, say) returned as a *PanicError instead of killing the
// caller.
func (e *Engine) newSampler(req Request) (smp *sample.Sampler, err error) {
	defer func() {
		if v := recover(); v != nil {
			smp, err = nil, e.recovered("submit", v)
		}
	}()
	if e.testHook != nil {
		e.testHook("submit", &req)
	}
	smp, err = sample.New(req.Sampling, e.lim.Vocab)
	if err != nil {
		return nil, err
	}
	for _, t := range req.Prompt {
		smp.Accept(t)
	}
	return smp, nil
}

// ErrSamplingTooSlow is wrapped by the *sample.RequestError of a request ended because its
// sampling (a grammar's token masks above all) took longer per token than Config.MaxSampleTime.
var ErrSamplingTooSlow = errors.New("engine: sampling this request takes too long per token")

// sampleWindow is the number of tokens over which a sequence's mean sampling time is held
// against Config.MaxSampleTime: long enough that one slow token (a grammar state met for the
// first time) is forgiven, short enough that a grammar that is slow at every token holds the
// other streams back for a few steps only.
const sampleWindow = 8

// defaultSampleTime is Config.MaxSampleTime's default: half the inter-token target, so that
// one sequence cannot take the step past it alone, but at least 5 ms, which the plain sampling
// of a 150k-token vocabulary (under 1 ms) stays well below; 50 ms without a target.
func defaultSampleTime(target time.Duration) time.Duration {
	if target <= 0 {
		return 50 * time.Millisecond
	}
	return max(target/2, 5*time.Millisecond)
}

// chargeSample adds d, the time s's latest Sample took, to its account, and returns the error
// that ends s when the mean over its latest full window exceeds Config.MaxSampleTime. The first
// sample is not charged: it builds the grammar's first states, which later tokens reuse.
func (e *Engine) chargeSample(s *sequence, d time.Duration) error {
	bound := e.cfg.MaxSampleTime
	if bound < 0 {
		return nil
	}
	if !s.sampledOnce {
		s.sampledOnce = true
		return nil
	}
	s.sampleSum += d
	s.sampleN++
	if s.sampleN < sampleWindow {
		return nil
	}
	mean := s.sampleSum / sampleWindow
	s.sampleSum, s.sampleN = 0, 0
	if mean <= bound {
		return nil
	}
	re := &sample.RequestError{Code: sample.CodeGrammarTooExpensive}
	what := "the sampling parameters are"
	if s.req.Sampling.Grammar != nil {
		re.Param, what = "grammar", "the grammar is"
	}
	re.Err = fmt.Errorf("%w: %v on average over %d tokens, above this server's bound of %v: %s too expensive to match at this server's latency target; simplify it",
		ErrSamplingTooSlow, mean.Round(time.Microsecond), sampleWindow, bound, what)
	return re
}
