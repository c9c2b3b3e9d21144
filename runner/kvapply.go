package runner

import "ubatch/batch"

// ApplyKV applies store operations outside a step (engine.KVApplier): the KV manager's pending
// copies, shifts, loads and saves, in order, with the images of the loads and saves (see
// kvstore.Store.ApplyImages). The engine uses it to read a slot's cells out for saving while
// no batch is being decoded.
func (c *Runtime) ApplyKV(ops []batch.KVOp, images [][]byte) error {
	return c.store.ApplyImages(ops, images)
}
