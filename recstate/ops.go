package recstate

// OpKind says what an Op does to the runner's states.
type OpKind uint8

const (
	// OpClear empties sequence Seq's state (StateClear): it starts from position 0.
	OpClear OpKind = iota + 1
	// OpCopy copies sequence Src's state to sequence Seq (StateCopy(Seq, Src)).
	OpCopy
	// OpLoad writes snapshot slot Snap into sequence Seq's state (StateLoad).
	OpLoad
	// OpSave reads sequence Seq's state into snapshot slot Snap (StateSave). It is appended
	// after the step that brought Seq to the snapshot's boundary and applied before the next
	// step changes Seq.
	OpSave
)

// Op is one state operation: what the Manager decided, for the state's owner (the runner, which
// keeps one state per sequence id and one StateBytes buffer per snapshot slot) to apply. The
// pending list (TakeOps) is in decision order and is applied in that order, all of it, before
// the next forward pass: so a slot read by an OpLoad still holds what it held when the load was
// decided even if a later OpSave reuses it, as kvcache's store operations are ordered.
type Op struct {
	Kind OpKind
	Seq  int32 // the sequence whose state is written (read, for OpSave)
	Src  int32 // OpCopy's source sequence
	Snap int32 // OpLoad's and OpSave's slot, in [0, Slots())
}
