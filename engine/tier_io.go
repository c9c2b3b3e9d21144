package engine

import (
	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/kvfile"
)

// The tiers' block I/O outside a step: reading cached blocks out of the store (slot save, a
// peer's export) and making them kvfile blocks.

// KVApplier is a Decoder that can apply store operations outside a step (runner.Runtime).
type KVApplier interface {
	ApplyKV(ops []batch.KVOp, images [][]byte) error
}

// readOut copies the cells of cached (Prefix's blocks) out of the store: it queues a save of
// each and applies the pending store operations at once (applyNow). Call it with t.ap set.
func (t *tierState) readOut(cached []kvcache.CachedBlock) ([][]byte, error) {
	imgs := make([]int32, len(cached))
	cells := make([]int32, len(cached))
	for i, cb := range cached {
		img, err := t.m.SaveCells(cb.Cell, cb.N)
		if err != nil {
			return nil, err
		}
		imgs[i], cells[i] = img, cb.N
	}
	return t.applyNow(imgs, cells)
}

// applyNow applies the manager's pending store operations at once (outside a step), with the
// images of the pending loads and spills and a buffer of cells[i] cells for each image in want,
// and hands the spills to the sink; it returns the images numbered want, filled.
func (t *tierState) applyNow(want, cells []int32) ([][]byte, error) {
	if m, ok := t.kv.(interface {
		TakeOps(dst []batch.KVOp) []batch.KVOp
	}); ok {
		t.ops = m.TakeOps(t.ops[:0])
	}
	var kv batch.KV
	t.stage(&kv)
	for i, idx := range want {
		t.setImage(idx, make([]byte, int64(cells[i])*t.cellB))
	}
	err := t.ap.ApplyKV(t.ops, t.imgs)
	out := make([][]byte, len(want))
	for i, idx := range want {
		out[i] = t.imgs[idx]
	}
	t.staged(&kv, err == nil)
	return out, err
}

// chain makes the blocks of cached (in chain order, from the start of tokens' chain) with
// their K/V data, each keyed from the one before (the first from parent) by its tokens: what
// it holds, which a receiving node checks against its own prompt's chain.
func (t *tierState) chain(parent kvcache.Key, cached []kvcache.CachedBlock, tokens []int32, data [][]byte) []kvfile.Block {
	bs := int32(t.m.Config().BlockSize)
	out := make([]kvfile.Block, len(cached))
	for i, cb := range cached {
		lo := cb.Depth * bs
		toks := append([]int32(nil), tokens[lo:lo+cb.N]...)
		key := kvcache.ChainKey(parent, toks)
		out[i] = t.block(key, parent, cb.Depth, toks, data[i])
		parent = key
	}
	return out
}

// block is the kvfile block of key at depth (parent its chain's previous key) holding tokens,
// at the positions depth·BlockSize on, with their K/V data.
func (t *tierState) block(key, parent kvcache.Key, depth int32, tokens []int32, data []byte) kvfile.Block {
	bs := int32(t.m.Config().BlockSize)
	pos := make([]int32, len(tokens))
	for i := range pos {
		pos[i] = depth*bs + int32(i)
	}
	return kvfile.Block{Key: key, Parent: parent, Depth: depth, Tokens: tokens, Pos: pos, Data: data}
}
