package recstate

import (
	"fmt"

	"ubatch/kvcache"
)

// Attention is the part of kvcache.Manager a hybrid admission combines with the states: the
// prefix match of the attention layers' blocks and the cut back to the state's boundary.
type Attention interface {
	CanAdmit(salt kvcache.Salt, prompt []int32, reserve int) kvcache.Admission
	Admit(seq int, salt kvcache.Salt, prompt []int32, reserve int) (int, error)
	SeqRemove(seq int, p0, p1 int32) error
	SeqFree(seq int)
}

// CanAdmit is kv.CanAdmit for a hybrid model: a hybrid prefix hit is the longest boundary where
// both the attention blocks and a snapshot exist, so Cached is cut back to Match's boundary and
// Need counts the blocks between as computed again. Avail still counts the cached blocks past
// the boundary as taken, which errs on the side of waiting.
func (m *Manager) CanAdmit(kv Attention, salt kvcache.Salt, prompt []int32, reserve int) kvcache.Admission {
	a := kv.CanAdmit(salt, prompt, reserve)
	hit := m.Match(salt, prompt, a.Cached)
	a.Need += a.Cached/int(m.bs) - hit/int(m.bs)
	a.Cached = hit
	return a
}

// Admit starts the empty sequence seq with prompt in both memories: kv.Admit attaches the cached
// attention prefix, Start restores the longest snapshot within it, and the attention prefix is
// cut back to that boundary. It returns the boundary, n: the caller decodes prompt[n:] from
// position n, its chunks cut by ChunkEnd. Check CanAdmit first. On error neither memory keeps
// the sequence.
func (m *Manager) Admit(kv Attention, seq int, salt kvcache.Salt, prompt []int32, reserve int) (int, error) {
	if err := m.check("Admit", seq, false); err != nil {
		return 0, err
	}
	cached, err := kv.Admit(seq, salt, prompt, reserve)
	if err != nil {
		return 0, err
	}
	hit, err := m.Start(seq, salt, prompt, cached)
	if err != nil {
		kv.SeqFree(seq)
		return 0, err
	}
	if hit < cached {
		if err := kv.SeqRemove(seq, int32(hit), -1); err != nil {
			m.Free(seq)
			kv.SeqFree(seq)
			return 0, fmt.Errorf("recstate: Admit: cutting sequence %d's attention prefix back to %d: %w", seq, hit, err)
		}
	}
	return hit, nil
}
