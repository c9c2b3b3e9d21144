package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"ubatch/kvcache"
	"ubatch/sample"
)

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

// emitStep emits the decoded batch (the step's forward pass began at start): a token sampled
// for each sequence whose last token was in it, a chunk pooled for each embedding, and the
// step's counts; it returns the StepInfo of the forward pass so far.
func (e *Engine) emitStep(start time.Time) StepInfo {
	info := StepInfo{Tokens: e.b.Len(), Budget: e.plan.tokens, Reason: e.plan.reason, Target: e.plan.target,
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
	return info
}

// observeStep completes info (capacity: the batch's, read before decode) with the whole step's
// time since began, feeds the cost model, and reports the step to the observer and the log.
func (e *Engine) observeStep(info StepInfo, capacity int, began time.Time) {
	info.Capacity = capacity
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

// finishGen sends generation sequence s's final output, its id and blocks freed (finish),
// and counts it: a KV cache outgrown is FinishLength, any other error FinishError.
func (e *Engine) finishGen(s *sequence, reason FinishReason, err error) {
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
