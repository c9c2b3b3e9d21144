package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"ubatch/kvcache"
	"ubatch/kvfile"
)

// Slot save and restore (llama-server's POST /slots/{id}?action=save|restore|erase) on the
// tiers' format. A slot's history is the tokens its running sequence holds in the KV cache, or,
// when idle, those of the last sequence that ran in it. Saving reads the blocks the cache holds
// for that history (full ones and a partial last one) out of the store; restoring imports a
// saved run of blocks into the prefix cache (so the next prompt that starts with it, in any
// slot, finds it cached) and makes it the slot's history; erasing forgets the history.

// ErrNoTiers: the engine was not given tiers (SetTiers), so slots cannot be saved.
var ErrNoTiers = errors.New("engine: slot save and restore need SetTiers")

// ErrSlotFile: the blocks to restore are not a saved slot's run: not chained from the start
// of a sequence, or not this cache's size of cells (a disk tier's block file deep in a
// sequence, say).
var ErrSlotFile = errors.New("engine: not a saved slot")

// ErrSlotSalted: the slot's history is a salted request's (Request.Salt), whose blocks are not
// written to slot files: a file restored by anyone would hand them to unsalted prompts.
var ErrSlotSalted = errors.New("engine: the slot last ran a request with a cache_salt, whose blocks are not saved")

// slotHistory is a slot's history: its tokens and their salt.
type slotHistory struct {
	tokens []int32
	salt   kvcache.Salt
}

// slotHistories is the slots' histories when idle, the last sequence's of each, owned by the
// Run goroutine. The core reaches it as a seqMemory: a sequence ending records its history
// there. It records nothing before SetTiers (kv nil), as slots are saved on the tiers.
type slotHistories struct {
	kv   kvOwner
	last map[int]slotHistory // slot id -> its last sequence's history
}

// admitted: a slot's history changes when its sequence leaves it.
func (h *slotHistories) admitted(*sequence) error { return nil }

// released records the history of generation sequence s, which ended, as its slot's.
func (h *slotHistories) released(s *sequence, preempted bool) {
	if preempted || h.kv == nil || s.embed != nil {
		return
	}
	h.last[int(s.kvSeq)] = slotHistory{tokens: slices.Clone(s.tokens[:h.kv.SeqLen(int(s.kvSeq))]), salt: s.req.Salt}
}

// ErrSlot: the slot id is outside the slots.
var ErrSlot = errors.New("engine: no such slot")

// control runs f on the Run goroutine and waits for it (or ctx, or the engine's end).
func (e *Engine) control(ctx context.Context, f func()) error {
	if e.tier.m == nil {
		return ErrNoTiers
	}
	done := make(chan struct{})
	select {
	case e.ctl <- func() { f(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stopped:
		return ErrClosed
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stopped:
		return ErrClosed
	}
}

// SaveSlot returns the blocks of slot id's history the KV cache holds, read out of the store,
// in chain order, and the history's length.
func (e *Engine) SaveSlot(ctx context.Context, id int) ([]kvfile.Block, int, error) {
	var blocks []kvfile.Block
	var n int
	var err error
	cerr := e.control(ctx, func() { blocks, n, err = e.saveSlot(id) })
	return blocks, n, errors.Join(cerr, err)
}

func (e *Engine) saveSlot(id int) ([]kvfile.Block, int, error) {
	if err := e.checkSlot(id); err != nil {
		return nil, 0, err
	}
	t := e.tier
	if t.ap == nil || t.m == nil {
		return nil, 0, ErrNoTiers
	}
	h := e.history(id)
	if !h.salt.IsZero() {
		return nil, 0, fmt.Errorf("%w (slot %d)", ErrSlotSalted, id)
	}
	if len(h.tokens) == 0 {
		return nil, 0, nil
	}
	cached := t.m.Prefix(nil, kvcache.Salt{}, h.tokens)
	data, err := t.readOut(cached)
	if err != nil {
		return nil, 0, err
	}
	parent := kvcache.RootKey
	if len(cached) > 0 {
		parent = cached[0].Parent
	}
	return t.chain(parent, cached, h.tokens, data), len(h.tokens), nil
}

// checkSlot reports ErrSlot for an id outside the slots.
func (e *Engine) checkSlot(id int) error {
	if id < 0 || id >= e.cfg.MaxRunning {
		return fmt.Errorf("%w: %d (there are %d)", ErrSlot, id, e.cfg.MaxRunning)
	}
	return nil
}

// RestoreSlot imports blocks (a saved run, chained from the start) into the prefix cache and
// makes their tokens slot id's history. It returns the tokens the cache then holds of it.
func (e *Engine) RestoreSlot(ctx context.Context, id int, blocks []kvfile.Block) (int, error) {
	var n int
	var err error
	cerr := e.control(ctx, func() { n, err = e.restoreSlot(id, blocks) })
	return n, errors.Join(cerr, err)
}

func (e *Engine) restoreSlot(id int, blocks []kvfile.Block) (int, error) {
	if err := e.checkSlot(id); err != nil {
		return 0, err
	}
	t := e.tier
	if t.m == nil {
		return 0, ErrNoTiers
	}
	var hist []int32
	t.loads = t.loads[:0]
	parent := kvcache.RootKey
	for i, b := range blocks {
		if int(b.Depth) != i || b.Parent != parent || int64(len(b.Data)) != int64(len(b.Tokens))*t.cellB {
			return 0, fmt.Errorf("%w: its block %d (at depth %d) does not continue the one before it from the start of a sequence", ErrSlotFile, i, b.Depth)
		}
		parent = b.Key
		hist = append(hist, b.Tokens...)
		t.loads = append(t.loads, kvcache.ImportBlock{Depth: b.Depth, Cells: int32(len(b.Tokens))})
	}
	var held int
	t.imgIdx, held = t.m.Import(kvcache.Salt{}, hist, t.loads, t.imgIdx[:0])
	t.setLoads(t.imgIdx, blocks)
	e.saved.last[id] = slotHistory{tokens: hist[:held]}
	return held, nil
}

// EraseSlot forgets slot id's history (an idle slot's; a running sequence goes on) and returns
// its length.
func (e *Engine) EraseSlot(ctx context.Context, id int) (int, error) {
	var n int
	var err error
	cerr := e.control(ctx, func() {
		if err = e.checkSlot(id); err != nil {
			return
		}
		n = len(e.saved.last[id].tokens)
		delete(e.saved.last, id)
	})
	return n, errors.Join(cerr, err)
}

// history is slot id's history: its running sequence's tokens in the KV cache, else the last
// one's.
func (e *Engine) history(id int) slotHistory {
	for _, s := range e.running {
		if int(s.kvSeq) == id {
			return slotHistory{tokens: s.tokens[:e.nKV(s)], salt: s.req.Salt}
		}
	}
	return e.saved.last[id]
}
