package sample

import (
	"errors"
	"fmt"
)

// sampleGrammar samples a token the grammar allows: the unconstrained choice when the grammar
// accepts it (one cheap check, the common case once the model follows the format), else a fresh
// draw from the same chain over the allowed tokens only.
func (s *Sampler) sampleGrammar(logits []float32) int32 {
	if s.gm.Done() {
		s.err = errors.New("sample: the grammar's output already ended with an end-of-generation token")
		return -1
	}
	if tok := s.sampleFree(logits); tok >= 0 && s.gm.AcceptToken(tok) == nil {
		return tok
	}
	mask := s.gm.Mask()
	c, maxL := s.prepare(logits, mask)
	if len(c) == 0 {
		s.err = s.deadEnd(mask, logits)
		return -1
	}
	var tok int32
	if s.p.Temperature <= 0 {
		tok = argmaxCand(c)
	} else {
		tok = s.sampleDist(c, maxL)
	}
	if err := s.gm.AcceptToken(tok); err != nil { // the mask allowed tok: a bug if it happens
		s.err = fmt.Errorf("sample: grammar mask and matcher disagree: %w", err)
		return -1
	}
	return tok
}

// deadEnd explains why no allowed token could be sampled. Every reason but NaN logits (the
// model's fault) is the request's: its grammar, or its ignore_eos against a complete grammar.
func (s *Sampler) deadEnd(mask []uint64, logits []float32) error {
	if err := s.gm.Err(); err != nil {
		return grammarLimit(err)
	}
	allowed, ignored := 0, 0
	for t := range len(logits) {
		if mask[t>>6]&(1<<(t&63)) != 0 {
			allowed++
			if s.ignored(int32(t)) {
				ignored++
			}
		}
	}
	switch {
	case allowed == 0:
		return requestError("grammar", CodeGrammarDeadEnd, "sample: grammar dead end: no token of the vocabulary can continue the output")
	case allowed == ignored && s.sampled < s.p.MinTokens && s.gm.Complete():
		return requestError("min_tokens", CodeGrammarDeadEnd, "sample: the grammar's output is complete after %d tokens and only end of generation can follow, but min_tokens asks for %d: lower min_tokens or let the grammar write more", s.sampled, s.p.MinTokens)
	case allowed == ignored && s.gm.Complete():
		return requestError("ignore_eos", CodeGrammarDeadEnd, "sample: the grammar is complete and only end of generation can follow, but end of generation is disabled (ignore_eos)")
	case allowed == ignored:
		return requestError("ignore_eos", CodeGrammarDeadEnd, "sample: every token the grammar allows is excluded from sampling")
	}
	return errors.New("sample: every token the grammar allows has a NaN logit")
}
