package engine

import (
	"errors"
	"fmt"

	"ubatch/kvcache"
	"ubatch/recstate"
)

// A hybrid model (qwen35: gated delta nets beside a few full-attention layers) keeps, besides the
// attention layers' KV blocks, one recurrent state per sequence id in its decoder. That state is
// overwritten by every token, valid only at the position it was taken, and cannot be cut back,
// shared or shifted as blocks are. recstate.Manager is its bookkeeping; the component here joins
// it to the core: hybridKV pairs it with the KV manager (admission: a prefix hit is the longest
// boundary where both the blocks and a snapshot exist; a free frees both), recurrentStates is the
// per-sequence memory (seqMemory) and the step's side (chunks cut where a snapshot is due, each
// sequence's state advanced after a forward pass, the state operations applied before the next).
// Preemption is by recompute: the state goes with the sequence id and is cleared, or restored
// from a snapshot, when the sequence is admitted again.

// stateDecoder is a hybrid decoder's recurrent side (runner.Runtime): one live state per sequence
// id in [0, NSeqMax), StateBytes bytes each, and snapshot slots in [0, n) once
// ReserveSnapshots(n) made them, which SnapshotSave and SnapshotLoad copy whole states into and
// out of.
type stateDecoder interface {
	Recurrent() bool
	StateBytes() int
	StateClear(seq int)
	StateCopy(dst, src int)
	ReserveSnapshots(n int) error
	SnapshotSave(slot, seq int)
	SnapshotLoad(seq, slot int)
	SnapshotRead(slot int, dst []byte)        // a slot's state, in StateSave's layout
	SnapshotWrite(slot int, src []byte) error // a slot's state from StateSave's bytes, checked
}

// Snapshot memory defaults (Config.StateCacheBytes 0): defaultSnapshotsPerSeq slots per sequence
// id, within maxDefaultStateCache bytes. recstate.DefaultPolicy keeps a snapshot every 32 blocks
// (512 tokens), at a prompt's branch point and last full block, and at each sequence's latest
// boundary: a few per sequence cover a shared system prompt and the next turn of each chat.
const (
	defaultSnapshotsPerSeq = 8
	maxDefaultStateCache   = 1 << 30
)

// stateCacheBudget is the snapshots' byte budget for cfg's StateCacheBytes: 0 takes the default
// (defaultSnapshotsPerSeq per sequence id within maxDefaultStateCache, at least one slot),
// negative keeps none.
func stateCacheBudget(want int64, stateBytes int64, nSeq int) int64 {
	switch {
	case want < 0:
		return 0
	case want > 0:
		return want
	}
	return max(stateBytes, min(int64(defaultSnapshotsPerSeq*nSeq)*stateBytes, maxDefaultStateCache))
}

// ErrRecurrentShift is New's refusal of ContextShift for a hybrid model.
var ErrRecurrentShift = fmt.Errorf("engine: context shift is refused for this hybrid recurrent model (qwen35): %w", recstate.ErrContextShift)

// errRecurrentOps is New's refusal of a decoder that keeps a recurrent state per sequence but
// cannot clear or copy it: scheduled as a plain model, it would run sequences on stale states.
var errRecurrentOps = errors.New("engine: the decoder keeps a recurrent state per sequence but has no StateClear and StateCopy to manage it")

// ErrRecurrentTiers: the KV tiers beyond RAM (disk, peers) carry KV blocks alone, and a hybrid
// model's blocks are useless (or, resumed without the recurrent state of their position,
// silently wrong) without the state, which only slot files carry yet (SaveSlotImage).
var ErrRecurrentTiers = errors.New("engine: a hybrid recurrent model (qwen35) keeps a recurrent state beside its KV blocks, " +
	"which the disk tier and peer fetch do not carry yet: serve it without --kv-disk and --peer-kv")

// hybridKV is a hybrid model's kvOwner: kvcache's manager with the recurrent states' bookkeeping
// beside it, so that every admission and free of the core covers both memories.
type hybridKV struct {
	*kvcache.Manager
	rec *recstate.Manager
}

// CanAdmit is recstate's: the cached prefix cut back to the longest boundary with a snapshot.
// With no snapshot slots no prefix is ever reused, so waiting for another sequence computing the
// same prefix would gain nothing.
func (h hybridKV) CanAdmit(salt kvcache.Salt, prompt []int32, reserve int) kvcache.Admission {
	a := h.rec.CanAdmit(h.Manager, salt, prompt, reserve)
	if h.rec.Slots() == 0 {
		a.Wait = false
	}
	return a
}

// Admit starts seq in both memories from its longest hybrid prefix hit (recstate.Admit): the
// state restored from the snapshot there (or cleared), the attention prefix cut back to it.
func (h hybridKV) Admit(seq int, salt kvcache.Salt, prompt []int32, reserve int) (int, error) {
	return h.rec.Admit(h.Manager, seq, salt, prompt, reserve)
}

// SeqFree frees seq's blocks and its state's bookkeeping (its latest snapshot stays cached).
func (h hybridKV) SeqFree(seq int) {
	h.rec.Free(seq)
	h.Manager.SeqFree(seq)
}

// SeqDiscard is the context shift's cut, impossible for a recurrent state.
func (h hybridKV) SeqDiscard(seq int, p0, p1 int32) error {
	return h.rec.Shift(seq, p0, p1-p0, -(p1 - p0))
}

// recurrentStates is the engine's side of the recurrent states: the per-sequence memory
// component of a hybrid model, and the hooks of each step. A nil *recurrentStates (a model
// without recurrent layers) does nothing.
type recurrentStates struct {
	rec *recstate.Manager
	dec stateDecoder
	ops []recstate.Op // TakeOps's, reused
}

// newRecurrent makes the hybrid component over kv for decoder d: snapshots within budget bytes
// (cfg.StateCacheBytes, see stateCacheBudget) under recstate.DefaultPolicy, their slots made in d.
func newRecurrent(d stateDecoder, kv *kvcache.Manager, nSeq int, budget int64) (*recurrentStates, *hybridKV, error) {
	sb := int64(d.StateBytes())
	rec, err := recstate.New(recstate.Config{MaxSeqs: nSeq, BlockSize: kv.Config().BlockSize,
		StateBytes: sb, Budget: stateCacheBudget(budget, sb, nSeq), Policy: recstate.DefaultPolicy})
	if err != nil {
		return nil, nil, fmt.Errorf("engine: %w", err)
	}
	if err := d.ReserveSnapshots(rec.Slots()); err != nil {
		return nil, nil, fmt.Errorf("engine: %w", err)
	}
	return &recurrentStates{rec: rec, dec: d}, &hybridKV{Manager: kv, rec: rec}, nil
}

// admitted starts the state of s when hybridKV.Admit did not (an embedding admitted without its
// cached prefix): from position 0, cleared before the next forward pass.
func (r *recurrentStates) admitted(s *sequence) error {
	if r == nil || r.rec.Live(int(s.kvSeq)) {
		return nil
	}
	if s.cached != 0 {
		return fmt.Errorf("engine: sequence %d holds %d cached tokens without a recurrent state", s.kvSeq, s.cached)
	}
	_, err := r.rec.Start(int(s.kvSeq), s.req.Salt, s.tokens, 0)
	return err
}

// released: hybridKV.SeqFree, which the core calls right after, frees the state's bookkeeping.
func (r *recurrentStates) released(*sequence, bool) {}

// chunkEnd returns where a chunk of s that would end at end must end instead: at the first
// boundary before end where s keeps a snapshot (a state is valid only where a step ends).
func (r *recurrentStates) chunkEnd(s *sequence, end int) int {
	if r == nil || s.kvSeq < 0 {
		return end
	}
	return r.rec.ChunkEnd(int(s.kvSeq), end)
}

// apply runs the pending state operations on the decoder, in order: before a forward pass
// (the clears and loads of admissions), and after one (its snapshot saves, while the states are
// at the boundary).
func (r *recurrentStates) apply() {
	if r == nil {
		return
	}
	r.ops = r.rec.TakeOps(r.ops[:0])
	for _, op := range r.ops {
		switch op.Kind {
		case recstate.OpClear:
			r.dec.StateClear(int(op.Seq))
		case recstate.OpCopy:
			r.dec.StateCopy(int(op.Seq), int(op.Src))
		case recstate.OpLoad:
			r.dec.SnapshotLoad(int(op.Seq), int(op.Snap))
		case recstate.OpSave:
			r.dec.SnapshotSave(int(op.Snap), int(op.Seq))
		}
	}
}

// advance records a forward pass that succeeded: every running sequence with a chunk in it
// consumed its tokens [before, before+chunk); then the snapshot saves it brought are applied. A
// state whose position is not its chunk's start would go on silently wrong: that is an error,
// which fails the step's sequences (it means the bookkeeping lost track).
func (r *recurrentStates) advance(running []*sequence) error {
	if r == nil {
		return nil
	}
	for _, s := range running {
		if s.chunk == 0 || s.kvSeq < 0 {
			continue
		}
		if p := r.rec.Pos(int(s.kvSeq)); p != s.before {
			return fmt.Errorf("engine: the recurrent state of sequence %d is at position %d, its chunk began at %d", s.kvSeq, p, s.before)
		}
		if err := r.rec.Advance(int(s.kvSeq), s.tokens[s.before:s.before+s.chunk]); err != nil {
			return fmt.Errorf("engine: %w", err)
		}
	}
	r.apply()
	return nil
}

// Recurrent reports whether the engine schedules a hybrid model, whose sequences keep a
// recurrent state beside their KV blocks (no context shift, no tiers beyond RAM but slot files).
func (e *Engine) Recurrent() bool { return e.rec != nil }
