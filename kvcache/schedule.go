package kvcache

import (
	"fmt"

	"ubatch/batch"
)

// CanSchedule reports whether Schedule(b, kv) would succeed now: b's positions and sequences
// continue the cache's sequences (see Reserve) and enough blocks are free or evictable for its
// new blocks and copy-on-write copies. It is the one capacity plan of a step: a Schedule of the
// same batch right after it (no mutating call between) does not plan again. It is false for an
// invalid batch too; CheckSchedule tells the two apart.
func (c *Manager) CanSchedule(b *batch.Batch) bool { return c.CheckSchedule(b) == nil }

// CheckSchedule is CanSchedule with the reason: nil, the validation error, or an error wrapping
// ErrKVFull. It changes nothing but scratch state.
func (c *Manager) CheckSchedule(b *batch.Batch) error {
	if len(b.Pos) != len(b.Tokens) {
		return fmt.Errorf("kvcache: %d tokens but %d positions", len(b.Tokens), len(b.Pos))
	}
	if err := c.CheckReserve(b.Pos, b.Seqs); err != nil {
		c.planFor = nil
		return err
	}
	c.planFor, c.planLen, c.planGen = b, b.Len(), c.gen
	return nil
}

// Schedule gives every token of b its cell, as Reserve does for the whole batch (b's tokens are
// appended to their sequences, and blocks filled are hashed), and fills kv for the store: Slots
// (len b.Len(), the cell of each token), Ops (every pending store operation, in order: those
// decided since the last Schedule or TakeOps, then this batch's copy-on-write copies), the
// views Tables, Lens and CellPos, and BlockSize. kv's slices are reused (no allocation once they
// have grown); the views are valid until the next mutating call. Schedule is atomic: on a
// validation error or ErrKVFull nothing changes (and kv is not touched).
//
// If the forward pass then fails, call ForgetCells(kv.Slots) before freeing the sequences: their
// cells have no K/V, so their blocks must never be matched. The store must still apply kv.Ops.
func (c *Manager) Schedule(b *batch.Batch, kv *batch.KV) error {
	if c.planFor != b || c.planLen != b.Len() || c.planGen != c.gen {
		if err := c.CheckSchedule(b); err != nil {
			return err
		}
	}
	c.planFor = nil
	c.gen++
	n := b.Len()
	if cap(kv.Slots) < n {
		kv.Slots = make([]int32, n, max(n, 2*cap(kv.Slots)))
	}
	kv.Slots = kv.Slots[:n]
	c.reserve(b.Tokens, b.Pos, b.Seqs, kv.Slots)
	kv.Ops = c.TakeOps(kv.Ops[:0])
	if cap(kv.Tables) < len(c.seqs) {
		kv.Tables = make([][]int32, len(c.seqs))
		kv.Lens = make([]int32, len(c.seqs))
	}
	kv.Tables, kv.Lens = kv.Tables[:len(c.seqs)], kv.Lens[:len(c.seqs)]
	for s := range c.seqs {
		kv.Tables[s], kv.Lens[s] = c.seqs[s].table, c.seqs[s].n
	}
	kv.CellPos, kv.BlockSize = c.cells.positions(), c.bs
	return nil
}
