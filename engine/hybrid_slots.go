package engine

import (
	"context"
	"errors"
	"fmt"

	"ubatch/kvfile"
)

// A hybrid model's slot is its blocks and snapshots of its recurrent state: saved, each block of
// the slot's history with a snapshot in the pool gives a kvfile.State beside the blocks; restored, the state goes into a snapshot slot under its block's Key, so that a prompt
// continuing the history resumes from it as from any snapshot (a hybrid prefix hit).

// SaveSlotImage is SaveSlot with, for a hybrid model, the snapshots of the slot's recurrent
// state the pool holds at boundaries of its history (none when it holds none: the blocks alone
// then resume nothing, and a prompt continuing the history computes it again).
func (e *Engine) SaveSlotImage(ctx context.Context, id int) ([]kvfile.Block, []kvfile.State, int, error) {
	var blocks []kvfile.Block
	var states []kvfile.State
	var n int
	var err error
	cerr := e.control(ctx, func() {
		if blocks, n, err = e.saveSlot(id); err == nil {
			states = e.rec.saveStates(blocks)
		}
	})
	return blocks, states, n, errors.Join(cerr, err)
}

// RestoreSlotImage is RestoreSlot with the states of a hybrid model's slot file: each must
// name one of blocks (a full block, at its end) and fit the model's state, or the file is
// ErrSlotFile; a state the pool has no free slot for is left out (the history is then
// recomputed when resumed).
func (e *Engine) RestoreSlotImage(ctx context.Context, id int, blocks []kvfile.Block, states []kvfile.State) (int, error) {
	var n int
	var err error
	cerr := e.control(ctx, func() {
		if len(states) > 0 && e.rec == nil {
			err = fmt.Errorf("%w: it holds recurrent states, and this model keeps none", ErrSlotFile)
			return
		}
		if err = e.rec.checkStates(blocks, states); err != nil {
			return
		}
		if n, err = e.restoreSlot(id, blocks); err == nil {
			err = e.rec.restoreStates(states)
		}
	})
	return n, errors.Join(cerr, err)
}

// saveStates returns the snapshots the pool holds at the ends of the full blocks of blocks (a
// chain from the start), read out of the decoder: the prompt's last block and the history's
// latest boundary, say, so that the same prompt and its next turn both resume.
func (r *recurrentStates) saveStates(blocks []kvfile.Block) []kvfile.State {
	if r == nil {
		return nil
	}
	bs := r.rec.Config().BlockSize
	var states []kvfile.State
	for i := range blocks {
		b := &blocks[i]
		slot, pos, ok := r.rec.Find(b.Key)
		if !ok || len(b.Tokens) != bs || pos != (int(b.Depth)+1)*bs {
			continue
		}
		data := make([]byte, r.dec.StateBytes())
		r.dec.SnapshotRead(slot, data)
		states = append(states, kvfile.State{Key: b.Key, Pos: int32(pos), Data: data})
	}
	return states
}

// checkStates verifies that each state ends a full block of blocks.
func (r *recurrentStates) checkStates(blocks []kvfile.Block, states []kvfile.State) error {
	if r == nil {
		return nil
	}
	bs := r.rec.Config().BlockSize
	for i, st := range states {
		d := int(st.Pos)/bs - 1
		if d < 0 || d >= len(blocks) || blocks[d].Key != st.Key || len(blocks[d].Tokens) != bs || len(st.Data) != r.dec.StateBytes() {
			return fmt.Errorf("%w: its state %d (at %d) does not end one of its full blocks", ErrSlotFile, i, st.Pos)
		}
	}
	return nil
}

// restoreStates puts states into snapshot slots. The state operations pending are applied
// first, so that none reads a slot this overwrites.
func (r *recurrentStates) restoreStates(states []kvfile.State) error {
	if r == nil {
		return nil
	}
	r.apply()
	for i, st := range states {
		slot, fresh, ok, err := r.rec.Import(st.Key, int(st.Pos))
		if err != nil {
			return fmt.Errorf("%w: its state %d: %v", ErrSlotFile, i, err)
		}
		if !ok || !fresh {
			continue // no room, or the pool holds that snapshot already
		}
		if err := r.dec.SnapshotWrite(slot, st.Data); err != nil {
			r.rec.Discard(slot)
			return fmt.Errorf("%w: its state %d: %v", ErrSlotFile, i, err)
		}
	}
	return nil
}
