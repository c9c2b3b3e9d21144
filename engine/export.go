package engine

import (
	"context"
	"errors"

	"ubatch/kvcache"
	"ubatch/kvfile"
)

// ExportBlocks returns the leading full blocks of tokens that the RAM prefix cache holds, at
// most max of them, with their K/V copied out (a peer serving POST /kv/blocks). It runs on the
// engine goroutine between steps (control): the store operations still pending (loads of
// imported blocks, copies, saves of evicted blocks to a sink) are applied first, in their
// order, so the copy is what the blocks hold. It waits for the engine, or for ctx. Only blocks
// of salt are found (a salted request's peer fetch), chained from salt.Key.
func (e *Engine) ExportBlocks(ctx context.Context, salt kvcache.Salt, tokens []int32, max int) ([]kvfile.Block, error) {
	var blocks []kvfile.Block
	var err error
	cerr := e.control(ctx, func() { blocks, err = e.exportBlocks(salt, tokens, max) })
	return blocks, errors.Join(cerr, err)
}

func (e *Engine) exportBlocks(salt kvcache.Salt, tokens []int32, max int) ([]kvfile.Block, error) {
	if e.rec != nil { // a peer would resume the blocks without their recurrent state
		return nil, ErrRecurrentTiers
	}
	t := e.tier
	if t.ap == nil || t.m == nil {
		return nil, ErrNoTiers
	}
	bs := t.m.Config().BlockSize
	found := t.m.Prefix(nil, salt, tokens)
	found = found[:min(len(found), max)]
	for len(found) > 0 && int(found[len(found)-1].N) < bs { // full blocks only
		found = found[:len(found)-1]
	}
	if len(found) == 0 {
		return nil, nil
	}
	data, err := t.readOut(found)
	if err != nil {
		return nil, err
	}
	return t.chain(salt.Key, found, tokens, data), nil
}
