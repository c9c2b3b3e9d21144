// Package sample draws the next token from a row of logits the way llama.cpp's common sampler
// chain does: penalties (repeat, frequency, presence over the last N accepted tokens), top-k,
// top-p, min-p, temperature, then a draw from the resulting distribution. A temperature of 0
// selects greedily (argmax after penalties, ties broken towards the lowest token id).
//
// A grammar (Params.Grammar) constrains the output: see Sampler.Sample.
//
// A Sampler belongs to one sequence: it owns its random generator, its penalty history, its
// grammar state and its scratch buffers, so it is not safe for concurrent use; use one Sampler
// per sequence.
package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"ubatch/grammar"
)

// Params configures a Sampler. The zero value is not the llama.cpp default; start from
// DefaultParams and override fields.
type Params struct {
	Temperature      float32 // in [0, 100]; 0 selects greedily; llama.cpp default 0.8
	TopK             int     // keep the K most likely tokens; 0 disables (default 40)
	TopP             float32 // nucleus mass in (0, 1]; 1 disables (default 0.95)
	MinP             float32 // keep tokens with p >= MinP * p_max, in [0, 1]; 0 disables (default 0.05)
	RepeatPenalty    float32 // in (0, 100]; 1 disables (default 1)
	RepeatLastN      int     // penalty window in tokens; 0 disables penalties, -1 = whole history (default 64)
	FrequencyPenalty float32 // in [-2, 2]; subtracted once per occurrence in the window
	PresencePenalty  float32 // in [-2, 2]; subtracted once if the token occurs in the window
	Seed             uint64  // seeds this sampler's own PCG generator
	// IgnoreTokens are token ids that are never sampled: llama.cpp's ignore_eos is this list
	// holding the end-of-generation tokens (then no caller need check for them).
	IgnoreTokens []int32
	// LogitBias adds a value in [-100, 100] to some tokens' logits before every other stage
	// (OpenAI's logit_bias: -100 all but bans a token, +100 all but forces it).
	LogitBias map[int32]float32
	// MinTokens holds EndTokens back until that many tokens have been sampled (vLLM's
	// min_tokens): they are not sampled before, whatever their logits or bias. EndTokens are
	// the end-of-generation tokens, as the vocabulary lists them.
	MinTokens int
	EndTokens []int32

	// Grammar, when set, constrains the output (see Sampler.Sample); GrammarVocab, required with
	// it, gives every token's text and the end-of-generation tokens. Both are immutable and
	// shared: each Sampler follows the grammar with a matcher of its own.
	Grammar      *grammar.Grammar
	GrammarVocab *grammar.Vocab
	// GrammarBudget bounds the work of one step of the grammar's matcher (grammar.Matcher's
	// SetBudget); past it the sequence fails with a RequestError. 0 means grammar.DefaultBudget.
	GrammarBudget int
}

// DefaultParams returns llama.cpp's default sampling settings (penalties off).
func DefaultParams() Params {
	return Params{
		Temperature:   0.8,
		TopK:          40,
		TopP:          0.95,
		MinP:          0.05,
		RepeatPenalty: 1,
		RepeatLastN:   64,
	}
}

// candidate is one surviving token during sampling. logit is reused to hold the unnormalised
// weight in the final draw, which keeps the scratch buffer at one slice.
type candidate struct {
	id    int32
	logit float32
}

// Sampler samples tokens for one sequence. Create it with New.
type Sampler struct {
	p         Params
	vocab     int
	pcg       *rand.PCG
	rng       *rand.Rand
	ignore    []int32     // the tokens not sampled now: ignoreAll, then ignoreEnd once MinTokens are out
	ignoreAll []int32     // sorted, deduplicated copy of p.IgnoreTokens
	ignoreEnd []int32     // ignoreAll and p.EndTokens, while fewer than MinTokens were sampled
	sampled   int         // tokens Sample returned since New or Reset
	bias      []tokenBias // p.LogitBias in id order
	penalty   bool        // whether any penalty is active, so Accept must keep history

	// hist holds the penalty window. With RepeatLastN > 0 it grows to RepeatLastN entries and
	// then becomes a ring overwritten at histPos; with -1 it grows without bound.
	hist    []int32
	histPos int
	// counts[t] is the number of occurrences of token t in hist. It is allocated only when
	// penalties are active, and is dense so Accept is O(1) whatever the window size.
	counts []int32

	cand       []candidate
	bucketMass [numBuckets]float64 // top-p scratch, see topPBuckets

	gm  *grammar.Matcher // nil without a grammar
	err error            // why the last Sample returned -1
}

// numBuckets is the resolution of the top-p mass histogram: finer buckets leave fewer
// candidates to sort in the one bucket that straddles the nucleus boundary.
const numBuckets = 1024

// New validates p (Validate) and returns a Sampler for logits rows of vocabSize entries.
func New(p Params, vocabSize int) (*Sampler, error) {
	if vocabSize <= 0 {
		return nil, fmt.Errorf("sample: vocabulary size must be positive, got %d", vocabSize)
	}
	if err := p.Validate(vocabSize); err != nil {
		return nil, err
	}
	s := &Sampler{p: p, vocab: vocabSize}
	s.ignoreAll = sortedSet(p.IgnoreTokens)
	s.ignore = s.ignoreAll
	if p.MinTokens > 0 {
		s.ignoreEnd = sortedSet(append(slices.Clone(p.IgnoreTokens), p.EndTokens...))
		s.ignore = s.ignoreEnd
	}
	s.penalty = p.RepeatLastN != 0 &&
		(p.RepeatPenalty != 1 || p.FrequencyPenalty != 0 || p.PresencePenalty != 0)
	if s.penalty {
		s.counts = make([]int32, vocabSize)
	}
	for id, b := range p.LogitBias {
		s.bias = append(s.bias, tokenBias{id, b})
	}
	slices.SortFunc(s.bias, func(a, b tokenBias) int { return int(a.id - b.id) })
	s.pcg = rand.NewPCG(p.Seed, seedStream(p.Seed))
	s.rng = rand.New(s.pcg)
	if p.Grammar != nil {
		s.gm = grammar.NewMatcher(p.Grammar, p.GrammarVocab)
		s.gm.SetBudget(p.GrammarBudget)
	}
	return s, nil
}

func sortedSet(ids []int32) []int32 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

// seedStream derives PCG's second seed word from the user seed so that a single uint64 seed
// yields distinct, well-mixed streams (splitmix64 finaliser).
func seedStream(seed uint64) uint64 {
	z := seed + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// ParamError is a Params field outside its range. Name is the parameter's name in llama.cpp's
// server API, which is also its JSON field there and in OpenAI's (temperature, top_k, top_p,
// min_p, repeat_penalty, repeat_last_n, frequency_penalty, presence_penalty, logit_bias,
// ignore_tokens, grammar): callers map it to their own spelling (a flag, a field).
type ParamError struct {
	Name  string
	Value any    // the value refused
	Want  string // what the value must be, e.g. "in (0, 1] (1 disables it)"
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("sample: %s must be %s, got %v", e.Name, e.Want, e.Value)
}

// Validate checks every parameter's range; it is the one check of them that the API server and
// the command line share. Token ids (IgnoreTokens, LogitBias) are checked against vocab when it
// is positive, so that flags can be checked before a model is loaded. The error is a
// *ParamError, or for an inconsistent grammar setup a plain error.
func (p *Params) Validate(vocab int) error {
	bad := func(name string, v any, want string) error { return &ParamError{Name: name, Value: v, Want: want} }
	in := func(v, lo, hi float32) bool { return v >= lo && v <= hi } // false for NaN
	switch {
	case !in(p.Temperature, 0, 100):
		return bad("temperature", p.Temperature, "in [0, 100] (0 = greedy)")
	case p.TopK < 0:
		return bad("top_k", p.TopK, ">= 0 (0 disables it)")
	case !(p.TopP > 0 && p.TopP <= 1):
		return bad("top_p", p.TopP, "in (0, 1] (1 disables it)")
	case !in(p.MinP, 0, 1):
		return bad("min_p", p.MinP, "in [0, 1] (0 disables it)")
	case !(p.RepeatPenalty > 0 && p.RepeatPenalty <= 100):
		return bad("repeat_penalty", p.RepeatPenalty, "in (0, 100] (1 disables it)")
	case p.RepeatLastN < -1:
		return bad("repeat_last_n", p.RepeatLastN, ">= -1 (-1 = whole history, 0 disables the penalties)")
	case !in(p.FrequencyPenalty, -2, 2):
		return bad("frequency_penalty", p.FrequencyPenalty, "in [-2, 2] (0 disables it)")
	case !in(p.PresencePenalty, -2, 2):
		return bad("presence_penalty", p.PresencePenalty, "in [-2, 2] (0 disables it)")
	case p.MinTokens < 0:
		return bad("min_tokens", p.MinTokens, ">= 0 (0 disables it)")
	}
	for _, t := range p.IgnoreTokens {
		if t < 0 || vocab > 0 && int(t) >= vocab {
			return bad("ignore_tokens", t, fmt.Sprintf("a token id in [0, %d)", vocab))
		}
	}
	for _, t := range p.EndTokens {
		if t < 0 || vocab > 0 && int(t) >= vocab {
			return bad("min_tokens", t, fmt.Sprintf("held back until min_tokens with end tokens in [0, %d)", vocab))
		}
	}
	for t, b := range p.LogitBias {
		if t < 0 || vocab > 0 && int(t) >= vocab {
			return bad("logit_bias", t, fmt.Sprintf("keyed by token ids in [0, %d)", vocab))
		}
		if !in(b, -100, 100) {
			return bad("logit_bias", b, fmt.Sprintf("a bias in [-100, 100] (token %d)", t))
		}
	}
	switch {
	case p.Grammar == nil && p.GrammarVocab != nil:
		return errors.New("sample: GrammarVocab is set without a Grammar")
	case p.Grammar != nil && p.GrammarVocab == nil:
		return errors.New("sample: a Grammar needs GrammarVocab (the tokens' text)")
	case p.Grammar != nil && vocab > 0 && p.GrammarVocab.Size() != vocab:
		return fmt.Errorf("sample: the grammar vocabulary has %d tokens, the model %d", p.GrammarVocab.Size(), vocab)
	}
	return nil
}

// Params returns the parameters the sampler was created with.
func (s *Sampler) Params() Params { return s.p }

// Accept records tok (a prompt token or a generated one) in the penalty history. Tokens outside
// [0, vocabSize) are ignored, since no logit exists to penalise. When no penalty is active the
// call does nothing.
func (s *Sampler) Accept(tok int32) {
	if !s.penalty || tok < 0 || int(tok) >= s.vocab {
		return
	}
	n := s.p.RepeatLastN
	if n < 0 || len(s.hist) < n {
		s.hist = append(s.hist, tok)
		s.counts[tok]++
		return
	}
	old := s.hist[s.histPos]
	s.counts[old]--
	s.hist[s.histPos] = tok
	s.counts[tok]++
	s.histPos++
	if s.histPos == n {
		s.histPos = 0
	}
}

// Reset forgets the penalty history, returns to the start of the grammar and re-seeds the
// generator, so the sampler repeats the sequence of draws it produced after New.
func (s *Sampler) Reset() {
	for _, t := range s.hist {
		s.counts[t] = 0
	}
	s.hist = s.hist[:0]
	s.histPos = 0
	s.pcg.Seed(s.p.Seed, seedStream(s.p.Seed))
	if s.gm != nil {
		s.gm.Reset()
	}
	s.err = nil
	s.sampled = 0
	s.ignore = s.ignoreAll
	if s.p.MinTokens > 0 {
		s.ignore = s.ignoreEnd
	}
}

// Sample picks the next token from logits, one entry per token id. It does not modify logits.
// A row shorter than the vocabulary only offers its own ids; a longer one is accepted too (the
// scratch buffer grows once). NaN logits are never chosen. Sample returns -1 only when no token
// can be chosen: an empty row, every token ignored or NaN, or (with a grammar) no token the
// grammar allows; Err then says why. It allocates nothing once the scratch buffer has been sized
// by the first call (with a grammar: once the grammar states it meets are cached).
//
// With a grammar, Sample returns only a token that continues the grammar, or an
// end-of-generation token once the output is a complete sentence of it, and advances the
// grammar by that token (Accept, which the caller still calls for penalties, does not). As
// llama.cpp does, it first samples as without a grammar and keeps the token when the grammar
// allows it; otherwise it masks every token the grammar forbids and samples again.
//
// Until Params.MinTokens tokens have been sampled, Params.EndTokens are not: Sample counts its
// own draws, since Accept also sees the prompt.
func (s *Sampler) Sample(logits []float32) int32 {
	s.err = nil
	var tok int32
	if s.gm != nil {
		tok = s.sampleGrammar(logits)
	} else if tok = s.sampleFree(logits); tok < 0 {
		s.err = s.noToken(logits)
	}
	if tok >= 0 {
		if s.sampled++; s.sampled == s.p.MinTokens {
			s.ignore = s.ignoreAll // the end tokens may come from the next token on
		}
	}
	return tok
}

// Err returns why the last Sample returned -1, or nil.
func (s *Sampler) Err() error { return s.err }

// sampleFree samples without a grammar.
func (s *Sampler) sampleFree(logits []float32) int32 {
	if s.p.Temperature <= 0 && !s.penalty && len(s.ignore) == 0 && len(s.bias) == 0 {
		return argmax(logits)
	}
	c, maxL := s.prepare(logits, nil)
	if s.p.Temperature <= 0 {
		return argmaxCand(c)
	}
	return s.sampleDist(c, maxL)
}

// ErrNoToken is wrapped by the error Err and Pick report when no token can be chosen without a
// grammar; test for it with errors.Is.
var ErrNoToken = errors.New("no token can be sampled")

// Pick is Sample with the reason instead of -1 when no token can be chosen: Err's error.
func (s *Sampler) Pick(logits []float32) (int32, error) {
	if tok := s.Sample(logits); tok >= 0 {
		return tok, nil
	}
	return -1, s.err
}

// noToken says why no token can be sampled from logits without a grammar: the row is empty,
// its samplable logits are all NaN (a model whose arithmetic broke down, e.g. NaN weights or an
// overflow), or every token is ignored (a *RequestError: the request's ignore list). It costs one
// pass over the row, on that failure only.
func (s *Sampler) noToken(logits []float32) error {
	if len(logits) == 0 {
		return fmt.Errorf("%w: the logits row is empty", ErrNoToken)
	}
	for i, v := range logits {
		if v != v && !s.ignored(int32(i)) {
			return fmt.Errorf("%w: NaN logits (the model's output is not a number: its weights or arithmetic are broken)", ErrNoToken)
		}
	}
	return &RequestError{Param: "ignore_eos", Code: CodeNoToken,
		Err: fmt.Errorf("%w: every token of the vocabulary is ignored", ErrNoToken)}
}

// argmax returns the index of the largest non-NaN value, the lowest index among ties, or -1.
func argmax(x []float32) int32 {
	first := 0
	for first < len(x) && x[first] != x[first] {
		first++
	}
	if first == len(x) {
		return -1
	}
	best, bv := first, x[first]
	// NaN compares false, so the hot loop needs no NaN test of its own.
	for i := first + 1; i < len(x); i++ {
		if x[i] > bv {
			best, bv = i, x[i]
		}
	}
	return int32(best)
}

// argmaxCand is argmax over candidates in ascending id order.
func argmaxCand(c []candidate) int32 {
	best := int32(-1)
	var bv float32
	for _, x := range c {
		if best < 0 || x.logit > bv {
			best, bv = x.id, x.logit
		}
	}
	return best
}

// prepare copies the samplable entries of logits into the scratch buffer, in ascending id order,
// applies the penalties, and returns them with their largest logit. Ignored tokens, NaN and
// (with a mask, one bit per token as grammar.Matcher.Mask gives) tokens outside the mask never
// appear; -Inf only when nothing else is left, so the caller still gets a token as argmax over
// the raw row would give. The result is empty only when no token can be chosen.
func (s *Sampler) prepare(logits []float32, mask []uint64) ([]candidate, float32) {
	if cap(s.cand) < len(logits) {
		s.cand = make([]candidate, max(len(logits), s.vocab))
	}
	c := s.cand[:len(logits)]
	negInf := float32(math.Inf(-1))
	maxL := negInf
	n, sawNegInf := 0, false
	ig := s.ignore
	for i, v := range logits {
		// ig is sorted, so one cursor skips the ignored ids without a lookup per token.
		if len(ig) > 0 && int(ig[0]) == i {
			ig = ig[1:]
			continue
		}
		if v != v || mask != nil && mask[i>>6]&(1<<(i&63)) == 0 {
			continue
		}
		if v == negInf {
			sawNegInf = true
			continue
		}
		c[n] = candidate{id: int32(i), logit: v}
		n++
		if v > maxL {
			maxL = v
		}
	}
	if n == 0 && sawNegInf {
		for i, v := range logits {
			if v == negInf && !s.ignored(int32(i)) && (mask == nil || mask[i>>6]&(1<<(i&63)) != 0) {
				c[n] = candidate{id: int32(i), logit: v}
				n++
			}
		}
		return c[:n], negInf
	}
	c = c[:n]
	if len(s.bias) > 0 && n > 0 {
		maxL = s.applyBias(c)
	}
	if s.penalty && n > 0 {
		maxL = s.applyPenalties(c, maxL)
	}
	return c, maxL
}

func (s *Sampler) ignored(t int32) bool {
	_, found := slices.BinarySearch(s.ignore, t)
	return found
}

// applyPenalties adjusts c (ascending ids) for every distinct token in the window, as llama.cpp
// does: the repeat penalty divides positive logits and multiplies negative ones, then
// count*frequency + presence is subtracted. It returns the new largest logit given the old one.
func (s *Sampler) applyPenalties(c []candidate, maxL float32) float32 {
	rp, fp, pp := s.p.RepeatPenalty, s.p.FrequencyPenalty, s.p.PresencePenalty
	newMax, rescan := maxL, false
	for _, t := range s.hist {
		n := s.counts[t]
		if n <= 0 {
			continue // already handled: counts are negated while in use to mark them
		}
		s.counts[t] = -n
		i, found := slices.BinarySearchFunc(c, t, func(x candidate, t int32) int { return int(x.id) - int(t) })
		if !found {
			continue // ignored, NaN or beyond the row
		}
		l := c[i].logit
		if l == maxL {
			rescan = true // the maximum may have moved to an unpenalised token
		}
		if l <= 0 {
			l *= rp
		} else {
			l /= rp
		}
		l -= float32(n)*fp + pp
		c[i].logit = l
		newMax = max(newMax, l)
	}
	for _, t := range s.hist {
		if n := s.counts[t]; n < 0 {
			s.counts[t] = -n
		}
	}
	if rescan {
		newMax = c[0].logit
		for _, x := range c[1:] {
			if x.logit > newMax {
				newMax = x.logit
			}
		}
	}
	return newMax
}

type tokenBias struct {
	id   int32
	bias float32
}

// applyBias adds the logit biases to the candidates (in id order) and returns the new maximum.
func (s *Sampler) applyBias(c []candidate) float32 {
	j := 0
	for _, b := range s.bias {
		for j < len(c) && c[j].id < b.id {
			j++
		}
		if j < len(c) && c[j].id == b.id {
			c[j].logit += b.bias
		}
	}
	maxL := float32(math.Inf(-1))
	for _, x := range c {
		maxL = max(maxL, x.logit)
	}
	return maxL
}
