package engine

import (
	"context"
	"errors"
	"slices"

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
	t := &e.tier
	ap, ok := e.dec.(KVApplier)
	if !ok || t.m == nil {
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
	imgs := make([]int32, len(found))
	cells := make([]int32, len(found))
	for i, cb := range found {
		img, err := t.m.SaveCells(cb.Cell, cb.N)
		if err != nil {
			return nil, err
		}
		imgs[i], cells[i] = img, cb.N
	}
	data, err := e.applyNow(ap, imgs, cells)
	if err != nil {
		return nil, err
	}
	out := make([]kvfile.Block, len(found))
	parent := salt.Key
	for i, cb := range found {
		lo := int(cb.Depth) * bs
		toks := slices.Clone(tokens[lo : lo+int(cb.N)])
		pos := make([]int32, cb.N)
		for j := range pos {
			pos[j] = int32(lo + j)
		}
		// The key from the tokens, as a slot save does: it is what the block holds, and the
		// receiving node checks it against its own prompt's chain.
		key := kvcache.ChainKey(parent, toks)
		out[i] = kvfile.Block{Key: key, Parent: parent, Depth: cb.Depth, Tokens: toks, Pos: pos, Data: data[i]}
		parent = key
	}
	return out, nil
}
