package engine

import (
	"cmp"
	"context"
	"time"

	"ubatch/sample"
)

// sequence is one sequence of a request (one of its n choices, or one embedding input) as the
// scheduler tracks it. tokens holds the whole history that must be in the KV cache (prompt, then
// generated tokens); the KV manager's SeqLen(kvSeq) of them are there
// already (Engine.nKV). A sequence with more than one token to compute is prefilling; with
// exactly one, it is decoding.
type sequence struct {
	kvSeq   int32    // KV sequence id; -1 while waiting
	kvSeqs  [1]int32 // kvSeq as the one-element slice batch.Add takes
	req     Request
	ctx     context.Context
	stream  *Stream
	choice  int // index of the request in its stream (Output.Seq)
	sampler *sample.Sampler
	tokens  []int32
	nPrompt int // prompt tokens still at the start of tokens (fewer after a context shift)
	// promptTokens is the request's prompt length, for usage.
	promptTokens int
	generated    int
	cached       int // prompt tokens taken from the prefix cache at the latest admission
	chunk        int // tokens of this sequence in the current batch
	before       int // its tokens in the KV cache when the current batch was built
	shifts       int // context shifts done
	// passedOver counts the consecutive steps in which this prefilling sequence got no chunk.
	passedOver int
	embed      *embedState // an embedding request's pooling (embed.go); nil for generation

	// The sampling time account (chargeSample): whether the uncharged first sample was taken,
	// and the time and count of the samples of the current window.
	sampledOnce bool
	sampleSum   time.Duration
	sampleN     int
	done        bool // the final output was pushed

	arrival   uint64 // submission order
	submitted time.Time
	lastToken time.Time
	usage     Usage
	counted   bool // admitted at least once (queue time recorded)

	// Admission order (orderWaiting): when the request was first queued, on the engine's clock
	// (kept across preemptions), its expected cost under SJF (0: not estimated yet), and as of
	// the latest admission round its aged priority and whether it has waited past MaxWait.
	queuedAt time.Time
	cost     int
	level    Priority
	overdue  bool
	// Fair share (fair.go): the running sequences of its client as of the latest admission
	// round, when it last began to wait (queued or preempted) and was last admitted.
	held       int
	waitSince  time.Time
	admittedAt time.Time
}

// nKV is the number of s's tokens in the KV cache (0 while waiting): the manager's length of its
// sequence, which has no holes (the engine removes cells with SeqDiscard alone, which compacts).
func (e *Engine) nKV(s *sequence) int {
	if s.kvSeq < 0 {
		return 0
	}
	return e.kv.SeqLen(int(s.kvSeq))
}

// remaining is the number of s's tokens still to compute.
func (e *Engine) remaining(s *sequence) int { return len(s.tokens) - e.nKV(s) }

// before orders sequences for service: higher priority first, then earlier arrival.
func before(a, b *sequence) int {
	if a.req.Priority != b.req.Priority {
		return cmp.Compare(b.req.Priority, a.req.Priority)
	}
	return cmp.Compare(a.arrival, b.arrival)
}

func (s *sequence) seqIDs() []int32 {
	s.kvSeqs[0] = s.kvSeq
	return s.kvSeqs[:]
}
