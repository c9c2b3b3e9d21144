package runner

import "fmt"

// Snapshot slots: copies of whole recurrent states kept beside the live ones, so that a hybrid
// model's prefix hit or cut back resumes from a state taken at an earlier position instead of
// recomputing from the start. The engine's recstate.Manager decides which slot holds what; the
// runtime only copies. Slot i is snaps[i·seqLen : (i+1)·seqLen], the layout of one sequence's
// state (recState).

// ReserveSnapshots makes n snapshot slots of StateBytes each, replacing any held before (their
// contents are lost). A model without recurrent layers takes none; n < 0 is an error.
func (c *Runtime) ReserveSnapshots(n int) error {
	if n < 0 {
		return fmt.Errorf("runner: %d snapshot slots", n)
	}
	if c.rec == nil {
		return nil
	}
	c.rec.snaps = make([]float32, n*c.rec.r.seqLen())
	return nil
}

// Snapshots is the number of snapshot slots ReserveSnapshots made.
func (c *Runtime) Snapshots() int {
	if c.rec == nil || c.rec.r.seqLen() == 0 {
		return 0
	}
	return len(c.rec.snaps) / c.rec.r.seqLen()
}

// snap returns snapshot slot i's state, panicking on a slot outside [0, Snapshots()): the
// engine's bookkeeping hands out only slots it was given.
func (s *recState) snap(i int) []float32 {
	n := s.r.seqLen()
	if i < 0 || (i+1)*n > len(s.snaps) {
		panic(fmt.Sprintf("runner: snapshot slot %d outside [0, %d)", i, len(s.snaps)/max(n, 1)))
	}
	return s.snaps[i*n : (i+1)*n]
}

// SnapshotSave copies sequence seq's recurrent state into snapshot slot. seq is in [0, NSeqMax),
// slot in [0, Snapshots()). It allocates nothing.
func (c *Runtime) SnapshotSave(slot, seq int) {
	if c.rec == nil {
		return
	}
	c.checkSeq(seq)
	copy(c.rec.snap(slot), c.rec.seq(seq))
}

// SnapshotLoad replaces sequence seq's recurrent state by snapshot slot's. seq is in
// [0, NSeqMax), slot in [0, Snapshots()). It allocates nothing.
func (c *Runtime) SnapshotLoad(seq, slot int) {
	if c.rec == nil {
		return
	}
	c.checkSeq(seq)
	copy(c.rec.seq(seq), c.rec.snap(slot))
}

// SnapshotRead writes snapshot slot's state into dst[:StateBytes()], in StateSave's layout.
// slot is in [0, Snapshots()); len(dst) >= StateBytes().
func (c *Runtime) SnapshotRead(slot int, dst []byte) {
	if c.rec == nil {
		return
	}
	putFloats(dst, c.rec.snap(slot))
}

// SnapshotWrite replaces snapshot slot's state by src, StateSave's bytes (a state of another
// size, or holding a value that is not finite, is an error and changes nothing). slot is in
// [0, Snapshots()).
func (c *Runtime) SnapshotWrite(slot int, src []byte) error {
	if c.rec == nil {
		return fmt.Errorf("runner: a recurrent state for a model without recurrent layers")
	}
	if slot < 0 || slot >= c.Snapshots() {
		return fmt.Errorf("runner: snapshot slot %d outside [0, %d)", slot, c.Snapshots())
	}
	return getFloats(c.rec.snap(slot), src)
}
