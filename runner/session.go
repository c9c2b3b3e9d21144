package runner

import (
	"errors"

	"ubatch/batch"
	"ubatch/kvcache"
)

// Session pairs a Runtime with the KV manager that schedules its batches, for decoding without
// an engine (the CLI tools, tests): per Decode it does what the engine does per step, so that
// its callers build plain batches. The caller makes it explicitly (NewSession); the Runtime
// does not know it. One manager schedules a Runtime's batches: while a Session decodes over a
// Runtime, no engine and no other Session may.
type Session struct {
	c     *Runtime
	kv    *kvcache.Manager
	sched batch.KV // the schedule of the last batch, reused
}

// NewSession makes a Session over c with a new, empty KV manager (c.KVConfig()).
func NewSession(c *Runtime) (*Session, error) {
	m, err := kvcache.NewManager(c.kvCfg)
	if err != nil {
		return nil, err
	}
	return &Session{c: c, kv: m}, nil
}

// KV returns the session's KV manager: sequence operations (SeqFree, SeqCopy, SeqDiscard, ...)
// and statistics. Changes made through it reach the store with the next Decode.
func (s *Session) KV() *kvcache.Manager { return s.kv }

// Runtime returns the Runtime the session decodes with.
func (s *Session) Runtime() *Runtime { return s.c }

// errScheduled: the session schedules every batch itself.
var errScheduled = errors.New("runner: a batch that already has a KV schedule, given to a Session: decode it with the Runtime of the manager that scheduled it")

// Decode schedules b (which must have no schedule: b.KV nil) on the session's manager and
// decodes it with Runtime.Decode. It checks b and that the cache can hold it first
// (kvcache.ErrKVFull, or the validation error, with nothing changed), gives its tokens their
// cells (Schedule), and sets b.KV to that schedule for the call only (nil again after, so that
// the batch may go to another session next). If the forward pass fails or panics, the batch's
// cells are forgotten (ForgetCells: never matched as a prefix); the sequences still hold them.
func (s *Session) Decode(b *batch.Batch) error {
	c := s.c
	if b.KV != nil {
		return errScheduled
	}
	if b.Len() > c.opts.NBatch {
		return c.decodeTooLarge(b)
	}
	if err := b.Validate(c.h.Vocab, c.opts.NSeqMax); err != nil {
		return err
	}
	if err := c.checkRecurrent(b); err != nil { // before any cell is given: nothing changes
		return err
	}
	if err := s.kv.CheckSchedule(b); err != nil {
		return err
	}
	if err := s.kv.Schedule(b, &s.sched); err != nil {
		return err
	}
	b.KV = &s.sched
	ok := false
	defer func() {
		b.KV = nil
		if !ok {
			s.kv.ForgetCells(s.sched.Slots)
		}
	}()
	err := c.Decode(b)
	ok = err == nil
	return err
}

// Logits returns the logits of token i of the last decoded batch; see Runtime.Logits.
func (s *Session) Logits(i int) []float32 { return s.c.Logits(i) }

// Embedding returns the embedding of token i of the last decoded batch; see Runtime.Embedding.
func (s *Session) Embedding(i int) []float32 { return s.c.Embedding(i) }
