package recstate

import (
	"fmt"

	"ubatch/kvcache"
)

// Advance records that a step consumed tokens for the live sequence seq, positions
// [Pos, Pos+len(tokens)): its state is now valid at the new Pos. When the step ends exactly at a
// block boundary and the policy keeps a snapshot there (or Tail does), an OpSave of seq into a
// slot is appended, unless the slot already holds that boundary (another sequence saved the same
// prefix), and seq is anchored on it. A save is skipped (counted) when every slot is referenced.
// Call it only for a step whose forward pass succeeded (else Lost).
func (m *Manager) Advance(seq int, tokens []int32) error {
	if err := m.check("Advance", seq, true); err != nil {
		return err
	}
	sq := &m.seqs[seq]
	for len(tokens) > 0 {
		k := min(len(tokens), int(m.bs)-len(sq.part))
		sq.part = append(sq.part, tokens[:k]...)
		tokens = tokens[k:]
		sq.pos += int32(k)
		if len(sq.part) == int(m.bs) {
			parent := sq.root
			if n := len(sq.keys); n > 0 {
				parent = sq.keys[n-1]
			}
			sq.keys = append(sq.keys, kvcache.ChainKey(parent, sq.part))
			sq.part = sq.part[:0]
		}
	}
	if len(sq.part) == 0 && sq.pos > 0 {
		m.save(seq)
	}
	return nil
}

// save snapshots seq at its boundary Pos when the policy asks, anchoring seq on the slot.
func (m *Manager) save(seq int) {
	sq := &m.seqs[seq]
	kept := m.wanted(sq, sq.pos)
	if !kept && !m.cfg.Policy.Tail {
		return
	}
	key := sq.keys[len(sq.keys)-1]
	id := m.snap.find(key)
	if id < 0 {
		// A tail only seq holds is dropped once superseded: free its slot first, so that the
		// new snapshot does not evict a kept one to make room.
		if a := sq.anchor; a >= 0 && m.snap.ref[a] == 1 && !m.snap.kept[a] {
			m.anchor(seq, -1)
		}
		var ok bool
		if id, ok = m.snap.take(key, sq.pos, kept); !ok {
			m.skipped++
			return
		}
		m.saves++
		m.ops = append(m.ops, Op{Kind: OpSave, Seq: int32(seq), Snap: id})
	} else {
		m.snap.kept[id] = m.snap.kept[id] || kept
		m.snap.use(id)
	}
	m.anchor(seq, id)
}

// Copy makes dst's state a copy of the live sequence src's (llama.cpp's seq_cp of a whole
// sequence): an OpCopy. A live dst is replaced. The caller copies the attention blocks too
// (kvcache's SeqCopy(src, dst, 0, -1)).
func (m *Manager) Copy(src, dst int) error {
	if err := m.check("Copy", src, true); err != nil {
		return err
	}
	if dst < 0 || dst >= len(m.seqs) {
		return fmt.Errorf("recstate: Copy: sequence id %d outside [0, %d)", dst, len(m.seqs))
	}
	if src == dst {
		return nil
	}
	m.Free(dst)
	s, d := &m.seqs[src], &m.seqs[dst]
	keys, part := append(d.keys[:0], s.keys...), append(d.part[:0], s.part...)
	*d = *s
	d.keys, d.part, d.anchor = keys, part, -1
	if s.anchor >= 0 {
		m.anchor(dst, s.anchor)
	}
	m.ops = append(m.ops, Op{Kind: OpCopy, Seq: int32(dst), Src: int32(src)})
	return nil
}

// Free ends seq: its anchor's reference is dropped (a tail snapshot stays cached for the next
// turn). A sequence that is not live is left alone. No operation: Start clears or loads.
func (m *Manager) Free(seq int) {
	if !m.Live(seq) {
		return
	}
	sq := &m.seqs[seq]
	if sq.anchor >= 0 {
		m.snap.unpin(sq.anchor, false)
	}
	*sq = seqState{keys: sq.keys[:0], part: sq.part[:0], anchor: -1}
}

// Cut is the outcome of cutting a sequence back: its state is valid at Pos now, and the caller
// decodes the Recompute tokens [Pos, Pos+Recompute) of its history again (after removing
// [Pos, ∞) from its attention blocks too) to reach the position it asked for. Pos 0 means the
// sequence restarts from its first token.
type Cut struct{ Pos, Recompute int }

// Remove is llama.cpp's seq_rm for a recurrent state, on the half-open range [p0, p1) with its
// conventions (p0 < 0 means 0, p1 < 0 means no end). A range at or past Pos changes nothing. A
// range reaching the end cuts seq back to p0: its state is restored from the nearest snapshot
// at or before p0 of its history (an OpLoad, or an OpClear when there is none) and the Cut says
// what to recompute. A range ending inside the history is refused with ErrHole, nothing changed.
func (m *Manager) Remove(seq int, p0, p1 int32) (Cut, error) {
	if err := m.check("Remove", seq, true); err != nil {
		return Cut{}, err
	}
	sq := &m.seqs[seq]
	p0 = max(p0, 0)
	if (p1 >= 0 && p1 <= p0) || p0 >= sq.pos {
		return Cut{Pos: int(sq.pos)}, nil
	}
	if p1 >= 0 && p1 < sq.pos {
		return Cut{Pos: int(sq.pos)}, fmt.Errorf("%w (sequence %d, [%d, %d) of %d tokens)", ErrHole, seq, p0, p1, sq.pos)
	}
	return m.cut(seq, p0), nil
}

// Lost restores the live sequence seq from the nearest snapshot at or before Pos: call it when
// a forward pass that was to update its state failed, so that the state's content is unknown.
func (m *Manager) Lost(seq int) (Cut, error) {
	if err := m.check("Lost", seq, true); err != nil {
		return Cut{}, err
	}
	return m.cut(seq, m.seqs[seq].pos), nil
}

// cut restores seq from the snapshot of the deepest block of its history ending at or before p.
func (m *Manager) cut(seq int, p int32) Cut {
	sq := &m.seqs[seq]
	i := min(int(p/m.bs), len(sq.keys))
	for ; i > 0; i-- {
		if id := m.snap.find(sq.keys[i-1]); id >= 0 && m.snap.pos[id] == int32(i)*m.bs {
			sq.keys, sq.part = sq.keys[:i], sq.part[:0]
			m.load(seq, id)
			return Cut{Pos: int(sq.pos), Recompute: int(p - sq.pos)}
		}
	}
	sq.keys, sq.part, sq.pos = sq.keys[:0], sq.part[:0], 0
	m.anchor(seq, -1)
	m.ops = append(m.ops, Op{Kind: OpClear, Seq: int32(seq)})
	return Cut{Pos: 0, Recompute: int(p)}
}

// Shift refuses llama.cpp's seq_add (and so a context shift) for a hybrid model with
// ErrContextShift, after checking its arguments: a state cannot drop or move positions.
func (m *Manager) Shift(seq int, p0, p1, delta int32) error {
	if seq < 0 || seq >= len(m.seqs) {
		return fmt.Errorf("recstate: Shift: sequence id %d outside [0, %d)", seq, len(m.seqs))
	}
	return fmt.Errorf("%w (sequence %d, [%d, %d) by %d)", ErrContextShift, seq, p0, p1, delta)
}

// Stats are counters of the snapshot pool.
type Stats struct {
	Slots, Snapshots, Referenced int   // slots, those holding a snapshot, those anchored on
	Bytes                        int64 // Snapshots × StateBytes
	Saves, Skipped               int64 // OpSaves appended; saves skipped, every slot referenced
	Evictions, Drops             int64 // LRU evictions; superseded tails freed
}

// Stats returns the pool's counters.
func (m *Manager) Stats() Stats {
	live, ref := m.snap.counts()
	return Stats{Slots: m.Slots(), Snapshots: live, Referenced: ref, Bytes: int64(live) * m.cfg.StateBytes,
		Saves: m.saves, Skipped: m.skipped, Evictions: m.snap.evictions, Drops: m.snap.drops}
}
