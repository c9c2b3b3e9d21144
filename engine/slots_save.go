package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/kvfile"
)

// Slot save and restore (llama-server's POST /slots/{id}?action=save|restore|erase) on the
// tiers' format. A slot's history is the tokens its running sequence holds in the KV cache, or,
// when idle, those of the last sequence that ran in it. Saving reads the blocks the cache holds
// for that history (full ones and a partial last one) out of the store; restoring imports a
// saved run of blocks into the prefix cache (so the next prompt that starts with it, in any
// slot, finds it cached) and makes it the slot's history; erasing forgets the history.

// KVApplier is a Decoder that can apply store operations outside a step (runner.Runtime).
type KVApplier interface {
	ApplyKV(ops []batch.KVOp, images [][]byte) error
}

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

// ErrSlot: the slot id is outside the slots.
var ErrSlot = errors.New("engine: no such slot")

// control runs f on the Run goroutine and waits for it (or ctx, or the engine's end).
func (e *Engine) control(ctx context.Context, f func()) error {
	if e.tier.control == nil {
		return ErrNoTiers
	}
	done := make(chan struct{})
	select {
	case e.tier.control <- func() { f(); close(done) }:
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
	if id < 0 || id >= e.cfg.MaxRunning {
		return nil, 0, fmt.Errorf("%w: %d (there are %d)", ErrSlot, id, e.cfg.MaxRunning)
	}
	t := &e.tier
	ap, ok := e.dec.(KVApplier)
	if !ok || t.m == nil {
		return nil, 0, ErrNoTiers
	}
	h := t.history(e, id)
	if !h.salt.IsZero() {
		return nil, 0, fmt.Errorf("%w (slot %d)", ErrSlotSalted, id)
	}
	hist := h.tokens
	if len(hist) == 0 {
		return nil, 0, nil
	}
	cached := t.m.Prefix(nil, kvcache.Salt{}, hist)
	imgs := make([]int32, len(cached))
	cells := make([]int32, len(cached))
	for i, cb := range cached {
		cells[i] = cb.N
		img, err := t.m.SaveCells(cb.Cell, cb.N)
		if err != nil {
			return nil, 0, err
		}
		imgs[i] = img
	}
	out, err := e.applyNow(ap, imgs, cells)
	if err != nil {
		return nil, 0, err
	}
	bs := int32(t.m.Config().BlockSize)
	blocks := make([]kvfile.Block, len(cached))
	for i, cb := range cached {
		lo := int(cb.Depth * bs)
		toks := slices.Clone(hist[lo : lo+int(cb.N)])
		pos := make([]int32, cb.N)
		for j := range pos {
			pos[j] = cb.Depth*bs + int32(j)
		}
		blocks[i] = kvfile.Block{Key: kvcache.ChainKey(cb.Parent, toks), Parent: cb.Parent, Depth: cb.Depth,
			Tokens: toks, Pos: pos, Data: out[i]}
		if i+1 < len(cached) {
			cached[i+1].Parent = blocks[i].Key
		}
	}
	return blocks, len(hist), nil
}

// applyNow applies the manager's pending store operations at once (outside a step), with the
// images of the pending loads and spills, and hands the spills to the sink; it returns the
// images numbered want, filled.
func (e *Engine) applyNow(ap KVApplier, want, cells []int32) ([][]byte, error) {
	t := &e.tier
	ops := e.kvOps()
	e.tierImagesFor(want, cells)
	err := ap.ApplyKV(ops, t.imgs)
	out := make([][]byte, len(want))
	for i, idx := range want {
		out[i] = t.imgs[idx]
	}
	e.tierSpilled(err == nil)
	return out, err
}

// kvOps takes the manager's pending store operations.
func (e *Engine) kvOps() []batch.KVOp {
	m, ok := e.kv.(interface {
		TakeOps(dst []batch.KVOp) []batch.KVOp
	})
	if !ok {
		return nil
	}
	e.sched.Ops = m.TakeOps(e.sched.Ops[:0])
	return e.sched.Ops
}

// tierImagesFor is tierImages plus a buffer for each image in want, of cells[i] cells (a
// slot's blocks).
func (e *Engine) tierImagesFor(want, cells []int32) {
	e.tierImages()
	t := &e.tier
	for i, idx := range want {
		for int(idx) >= len(t.imgs) {
			t.imgs = append(t.imgs, nil)
		}
		t.imgs[idx] = make([]byte, int64(cells[i])*t.cellB)
	}
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
	if id < 0 || id >= e.cfg.MaxRunning {
		return 0, fmt.Errorf("%w: %d (there are %d)", ErrSlot, id, e.cfg.MaxRunning)
	}
	t := &e.tier
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
	if t.last == nil {
		t.last = map[int]slotHistory{}
	}
	t.last[id] = slotHistory{tokens: hist[:held]}
	return held, nil
}

// EraseSlot forgets slot id's history (an idle slot's; a running sequence goes on) and returns
// its length.
func (e *Engine) EraseSlot(ctx context.Context, id int) (int, error) {
	var n int
	var err error
	cerr := e.control(ctx, func() {
		if id < 0 || id >= e.cfg.MaxRunning {
			err = fmt.Errorf("%w: %d (there are %d)", ErrSlot, id, e.cfg.MaxRunning)
			return
		}
		n = len(e.tier.last[id].tokens)
		delete(e.tier.last, id)
	})
	return n, errors.Join(cerr, err)
}

// history is slot id's history: its running sequence's tokens in the KV cache, else the last
// one's.
func (t *tierState) history(e *Engine, id int) slotHistory {
	for _, s := range e.running {
		if int(s.kvSeq) == id {
			return slotHistory{tokens: s.tokens[:e.nKV(s)], salt: s.req.Salt}
		}
	}
	return t.last[id]
}

// tierRemember records the history of s, which is leaving its slot, as the slot's.
func (e *Engine) tierRemember(s *sequence) {
	t := &e.tier
	if t.m == nil || s.kvSeq < 0 {
		return
	}
	if t.last == nil {
		t.last = map[int]slotHistory{}
	}
	t.last[int(s.kvSeq)] = slotHistory{tokens: slices.Clone(s.tokens[:e.nKV(s)]), salt: s.req.Salt}
}
