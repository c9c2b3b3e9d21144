package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/kvfile"
	"ubatch/kvstore"
)

// ErrNoTiers: the engine was started without SetTiers, so it cannot export blocks.
var ErrNoTiers = errors.New("engine: no KV tiers (SetTiers was not called)")

// storeHolder is a Decoder whose K/V memory the engine may read between steps
// (runner.Context).
type storeHolder interface{ Store() *kvstore.Store }

// opTaker is the KV manager's hand-over of pending store operations outside a step.
type opTaker interface {
	TakeOps(dst []batch.KVOp) []batch.KVOp
}

// ExportBlocks returns the leading full blocks of tokens that the RAM prefix cache holds, at
// most max of them, with their K/V copied out (a peer serving POST /kv/blocks; a slot save).
// It runs on the engine goroutine between steps: the store operations still pending (loads of
// imported blocks, copies, saves of evicted blocks to a sink) are applied first, in their
// order, so the copy is what the blocks hold. It waits for the engine, or for ctx.
func (e *Engine) ExportBlocks(ctx context.Context, tokens []int32, max int) ([]kvfile.Block, error) {
	t := &e.tier
	if t.control == nil {
		return nil, ErrNoTiers
	}
	type result struct {
		blocks []kvfile.Block
		err    error
	}
	done := make(chan result, 1)
	f := func() {
		b, err := e.exportNow(tokens, max)
		done <- result{b, err}
	}
	select {
	case t.control <- f:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.stopped:
		return nil, ErrClosed
	}
	select {
	case r := <-done:
		return r.blocks, r.err
	case <-ctx.Done(): // the result is dropped into the buffered channel
		return nil, ctx.Err()
	case <-e.stopped:
		return nil, ErrClosed
	}
}

// exportNow is ExportBlocks on the Run goroutine.
func (e *Engine) exportNow(tokens []int32, max int) ([]kvfile.Block, error) {
	t := &e.tier
	sh, ok1 := e.dec.(storeHolder)
	ot, ok2 := e.kv.(opTaker)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("engine: the decoder or KV manager cannot export blocks")
	}
	bs := t.m.Config().BlockSize
	found := t.m.Prefix(nil, tokens)
	if len(found) > max {
		found = found[:max]
	}
	for len(found) > 0 && int(found[len(found)-1].N) < bs { // full blocks only
		found = found[:len(found)-1]
	}
	if len(found) == 0 {
		return nil, nil
	}
	imgs := make([]int32, len(found))
	for i, cb := range found {
		img, err := t.m.SaveCells(cb.Cell, cb.N)
		if err != nil {
			return nil, err
		}
		imgs[i] = img
	}
	e.tierImages() // the pending loads' images and buffers for pending spills, as a step would
	for i, cb := range found {
		for int(imgs[i]) >= len(t.imgs) {
			t.imgs = append(t.imgs, nil)
		}
		t.imgs[imgs[i]] = make([]byte, int64(cb.N)*t.cellB)
	}
	ops := ot.TakeOps(nil)
	err := sh.Store().ApplyImages(ops, t.imgs)
	out := make([]kvfile.Block, len(found))
	for i, cb := range found {
		lo := int(cb.Depth) * bs
		pos := make([]int32, cb.N)
		for j := range pos {
			pos[j] = int32(lo + j)
		}
		out[i] = kvfile.Block{Key: cb.Key, Parent: cb.Parent, Depth: cb.Depth, Tokens: slices.Clone(tokens[lo : lo+int(cb.N)]),
			Pos: pos, Data: t.imgs[imgs[i]]}
	}
	e.tierSpilled(err == nil)
	if err != nil {
		return nil, fmt.Errorf("engine: applying store operations for an export: %w", err)
	}
	for _, b := range out {
		if b.Key == kvcache.RootKey {
			return nil, fmt.Errorf("engine: block %d has no key (tiers were set after it was cached)", b.Depth)
		}
	}
	return out, nil
}
