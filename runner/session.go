package runner

import (
	"ubatch/batch"
	"ubatch/kvcache"
)

// Session is a Runtime with a KV manager of its own, for decoding without an engine (the CLI
// tools, tests, embeddings): it does per Decode what the engine does per step, so that its
// callers build plain batches. Make one with NewSession, or use a Runtime's own (Runtime.KV,
// Runtime.Decode of a batch without a schedule).
type Session struct {
	c     *Runtime
	kv    *kvcache.Manager
	sched batch.KV // the schedule of the last batch, reused
}

// NewSession makes a Session over c with a new KV manager (c.KVConfig()). c must not be
// decoded otherwise meanwhile (by an engine, or through its own Session).
func NewSession(c *Runtime) (*Session, error) {
	m, err := kvcache.NewManager(c.kvCfg)
	if err != nil {
		return nil, err
	}
	c.external = true
	return &Session{c: c, kv: m}, nil
}

// KV returns the session's KV manager: sequence operations (SeqFree, SeqCopy, SeqDiscard, ...)
// and statistics. Changes made through it reach the store with the next Decode.
func (s *Session) KV() *kvcache.Manager { return s.kv }

// Runtime returns the context the session decodes with.
func (s *Session) Runtime() *Runtime { return s.c }

// Decode schedules b on the session's manager and runs it: it checks b and that the cache can
// hold it (kvcache.ErrKVFull, or the validation error, with nothing changed), gives its tokens
// their cells (Schedule) and decodes it with that schedule (b.KV is set to it for the call and
// nil again after, so that the batch may be decoded by another session next). If the forward
// pass fails or panics, the batch's cells are forgotten (ForgetCells: never matched as a
// prefix); the sequences still hold them.
func (s *Session) Decode(b *batch.Batch) error {
	c := s.c
	if b.Len() > c.opts.NBatch {
		b.KV = nil
		return c.decodeTooLarge(b)
	}
	if err := b.Validate(c.h.Vocab, c.opts.NSeqMax); err != nil {
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
	err := c.decode(b, true)
	ok = err == nil
	return err
}

// Logits returns the logits of token i of the last decoded batch; see Runtime.Logits.
func (s *Session) Logits(i int) []float32 { return s.c.Logits(i) }

// Embedding returns the embedding of token i of the last decoded batch; see Runtime.Embedding.
func (s *Session) Embedding(i int) []float32 { return s.c.Embedding(i) }
