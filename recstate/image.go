package recstate

import (
	"fmt"

	"ubatch/kvcache"
)

// Snapshots leave and enter the pool as images (a saved slot's file): the state's owner copies
// a slot's bytes out after Find, and into the slot Import gives before anything reads it.

// Find returns the slot holding the snapshot named k (the Key of the block ending at its
// boundary) and its position; ok is false when the pool holds none.
func (m *Manager) Find(k kvcache.Key) (slot, pos int, ok bool) {
	id := m.snap.find(k)
	if id < 0 {
		return 0, 0, false
	}
	return int(id), int(m.snap.pos[id]), true
}

// Import makes room for a snapshot named k at boundary pos brought from elsewhere (a restored
// slot file): the slot already holding it (fresh false: nothing to copy), else a free or
// evicted one kept as a policy boundary's is, which the caller fills with the state's bytes
// before the next state operation is applied. ok is false when every slot is referenced (or
// there are none). pos must be a positive multiple of BlockSize.
func (m *Manager) Import(k kvcache.Key, pos int) (slot int, fresh, ok bool, err error) {
	if pos <= 0 || pos%int(m.bs) != 0 {
		return 0, false, false, fmt.Errorf("recstate: Import: position %d is not a boundary of blocks of %d", pos, m.bs)
	}
	if id := m.snap.find(k); id >= 0 {
		if int(m.snap.pos[id]) != pos {
			return 0, false, false, fmt.Errorf("recstate: Import: the snapshot named by this key is at %d, not %d", m.snap.pos[id], pos)
		}
		m.snap.kept[id] = true
		return int(id), false, true, nil
	}
	id, ok := m.snap.take(k, int32(pos), true)
	if !ok {
		m.skipped++
		return 0, false, false, nil
	}
	return int(id), true, true, nil
}

// Discard forgets the fresh snapshot Import just gave slot when its bytes could not be written
// (a corrupt image): the slot goes back to the free ones. A referenced slot is left alone.
func (m *Manager) Discard(slot int) {
	id := int32(slot)
	if slot < 0 || slot >= len(m.snap.key) || !m.snap.live[id] || m.snap.ref[id] > 0 {
		return
	}
	m.snap.unlink(id)
	delete(m.snap.byKey, m.snap.key[id])
	m.snap.live[id] = false
	m.snap.free = append(m.snap.free, id)
}
