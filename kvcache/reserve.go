package kvcache

import (
	"errors"
	"fmt"
)

// simScratch holds the state of a dry run (of Reserve, or of a removal or shift) so that the
// dry run allocates nothing in steady state. Per-sequence and per-block entries are meaningful
// only where their epoch stamp equals the current epoch, so starting a dry run is O(1).
type simScratch struct {
	epoch    uint32
	seqEpoch []uint32
	n        []int32 // per seq: nCells after the tokens planned so far
	posMax   []int32
	tail     []int32 // per seq: last block, a real id or NumBlocks+i for planned block i
	group    []int32 // per seq: index of the last planned token that wrote it, -1 if none

	tokStamp uint32
	seqTok   []uint32 // per seq: tokStamp of the last token listing it, to catch duplicates

	blkEpoch   []uint32
	ref        []int32  // per real block: refcount after the steps planned so far
	blkWritten []uint32 // per real block: epoch of the last dry run that planned a write into it
	vref       []int32  // refcounts of the blocks planned so far
}

func (s *simScratch) init(nSeqs, nBlocks int) {
	s.seqEpoch = make([]uint32, nSeqs)
	s.n = make([]int32, nSeqs)
	s.posMax = make([]int32, nSeqs)
	s.tail = make([]int32, nSeqs)
	s.group = make([]int32, nSeqs)
	s.seqTok = make([]uint32, nSeqs)
	s.blkEpoch = make([]uint32, nBlocks)
	s.ref = make([]int32, nBlocks)
	s.blkWritten = make([]uint32, nBlocks)
}

func (s *simScratch) begin() {
	s.epoch++
	if s.epoch == 0 { // wrapped: old stamps could look current
		clear(s.seqEpoch)
		clear(s.blkEpoch)
		clear(s.blkWritten)
		s.epoch = 1
	}
	s.vref = s.vref[:0]
}

func (s *simScratch) nextTok() uint32 {
	s.tokStamp++
	if s.tokStamp == 0 {
		clear(s.seqTok)
		s.tokStamp = 1
	}
	return s.tokStamp
}

// simRef is block b's refcount in the current dry run (b >= NumBlocks: a planned block).
func (c *Manager) simRef(b int32) int32 {
	sm := &c.sim
	if nb := int32(len(c.ref)); b >= nb {
		return sm.vref[b-nb]
	}
	if sm.blkEpoch[b] == sm.epoch {
		return sm.ref[b]
	}
	return c.ref[b]
}

func (c *Manager) setSimRef(b, r int32) {
	sm := &c.sim
	if nb := int32(len(c.ref)); b >= nb {
		sm.vref[b-nb] = r
		return
	}
	sm.blkEpoch[b] = sm.epoch
	sm.ref[b] = r
}

// simLoad starts tracking seq in the current dry run.
func (c *Manager) simLoad(seq int32) {
	sm := &c.sim
	if sm.seqEpoch[seq] == sm.epoch {
		return
	}
	sq := &c.seqs[seq]
	sm.seqEpoch[seq] = sm.epoch
	sm.n[seq], sm.posMax[seq], sm.tail[seq], sm.group[seq] = sq.n, sq.posMax, -1, -1
	if len(sq.table) > 0 {
		sm.tail[seq] = sq.table[len(sq.table)-1]
	}
}

// sameHistory reports whether sequences a and b have identical block tables and lengths.
func (c *Manager) sameHistory(a, b int32) bool {
	sa, sb := &c.seqs[a], &c.seqs[b]
	if sa.n != sb.n || len(sa.table) != len(sb.table) {
		return false
	}
	for i, blk := range sa.table {
		if sb.table[i] != blk {
			return false
		}
	}
	return true
}

// planReserve validates a micro-batch against the cache and counts the blocks Reserve would
// allocate (new blocks and copy-on-write copies), changing nothing but the dry-run scratch.
//
// Tokens listing several sequences are checked for a shared history: before the micro-batch
// that means identical tables; within it, a sequence written by an earlier token shares history
// exactly with the sequences that token also wrote (the group), since each token appends one
// cell to exactly its own sequences.
func (c *Manager) planReserve(pos []int32, seqs [][]int32) (need int, err error) {
	if len(seqs) != len(pos) {
		return 0, fmt.Errorf("kvcache: %d positions but %d sequence lists", len(pos), len(seqs))
	}
	sm := &c.sim
	sm.begin()
	nb := int32(len(c.ref))
	for i, p := range pos {
		ss := seqs[i]
		if len(ss) == 0 {
			return 0, fmt.Errorf("kvcache: token %d: no sequence id", i)
		}
		if p < 0 {
			return 0, fmt.Errorf("kvcache: token %d: negative position %d", i, p)
		}
		stamp := sm.nextTok()
		for _, s := range ss {
			if s < 0 || int(s) >= len(c.seqs) {
				return 0, fmt.Errorf("kvcache: token %d: sequence id %d outside [0, %d)", i, s, len(c.seqs))
			}
			if sm.seqTok[s] == stamp {
				return 0, fmt.Errorf("kvcache: token %d: sequence id %d listed twice", i, s)
			}
			sm.seqTok[s] = stamp
			c.simLoad(s)
		}
		first := ss[0]
		g := sm.group[first]
		for _, s := range ss[1:] {
			if sm.group[s] != g || (g < 0 && !c.sameHistory(first, s)) {
				return 0, fmt.Errorf("kvcache: token %d: sequences %d and %d do not share their whole history", i, first, s)
			}
		}
		n := sm.n[first]
		if n > 0 && p != sm.posMax[first]+1 {
			return 0, fmt.Errorf("kvcache: token %d: position %d does not follow position %d of sequence %d",
				i, p, sm.posMax[first], first)
		}
		k := int32(len(ss))
		tail := sm.tail[first]
		if n%c.bs == 0 {
			need++
			tail = nb + int32(len(sm.vref))
			sm.vref = append(sm.vref, k)
		} else if r := c.simRef(tail); r > k {
			// Copy-on-write: the block is also held by sequences this token does not belong to.
			// Its cells reserved earlier in this micro-batch have no K/V yet (the forward pass
			// writes them after Reserve), so the copy would miss them.
			if tail >= nb || sm.blkWritten[tail] == sm.epoch {
				return 0, fmt.Errorf("kvcache: token %d: sequence %d diverges from sequences it shares a block with "+
					"inside that block, after tokens written to it in this micro-batch; decode the shared tokens "+
					"in an earlier micro-batch", i, first)
			}
			need++
			c.setSimRef(tail, r-k)
			tail = nb + int32(len(sm.vref))
			sm.vref = append(sm.vref, k)
		} else if tail < nb {
			sm.blkWritten[tail] = sm.epoch
		}
		for _, s := range ss {
			sm.n[s]++
			sm.posMax[s] = p
			sm.tail[s] = tail
			sm.group[s] = int32(i)
		}
	}
	return need, nil
}

// CanReserve reports whether Reserve would succeed for a micro-batch with these positions and
// sequence ids: the batch is valid for the cache's current state and enough free or evictable
// blocks exist, counting copy-on-write copies. It is false for an invalid batch too; use
// CheckReserve to tell the two apart.
func (c *Manager) CanReserve(pos []int32, seqs [][]int32) bool {
	return c.CheckReserve(pos, seqs) == nil
}

// CheckReserve is CanReserve with the reason: nil if Reserve would succeed, the validation error
// Reserve would return, or an error wrapping ErrKVFull. It changes nothing.
func (c *Manager) CheckReserve(pos []int32, seqs [][]int32) error {
	need, err := c.planReserve(pos, seqs)
	if err != nil {
		return err
	}
	if err := c.canAlloc(need); err != nil {
		return fmt.Errorf("a micro-batch of %d tokens: %w", len(pos), err)
	}
	return nil
}

// Reserve gives every token of a micro-batch its cell, in order, and records its position and
// token id; cells[i] receives the cell index for token i, where the caller then writes K and V
// for every layer. len(pos) and len(seqs) must equal len(tokens), len(cells) must be at least
// len(tokens); an empty micro-batch is a no-op.
//
// Token i is appended to each sequence in seqs[i], at position pos[i], which must be
// SeqPosMax(s)+1 for a non-empty sequence (any position >= 0 starts an empty one). A token
// listed with several sequences gets one cell appended to their common history, so they must
// have identical tables and lengths (or all be empty). A block that other sequences also hold
// is copied before being written (copy-on-write).
//
// Because K/V of this micro-batch's tokens are written only after Reserve returns, a sequence
// may not leave, inside a partially filled block, sequences it shared that block with when that
// block received tokens of this same micro-batch (e.g. a token for seqs {0,1} at position 5
// followed by a token for seq {0} alone at position 6, with blocks of 16): the copy would lack
// them. Reserve refuses that with a validation error; decode the shared tokens in an earlier
// micro-batch. Diverging at a block boundary, or from a block filled by earlier micro-batches,
// is fine.
//
// Reserve is atomic: validation errors are returned, and ErrKVFull when too few blocks are
// free or evictable, before anything changes. A block filled by Reserve is registered in the
// prefix index right away, so its K/V must be written before the next call that could hand it to
// another sequence (MatchPrefix/AttachPrefix); if the forward pass fails, call ForgetCells(cells)
// before removing the tokens. Copy-on-write copies become pending store operations.
func (c *Manager) Reserve(tokens, pos []int32, seqs [][]int32, cells []int32) error {
	c.gen++
	if len(pos) != len(tokens) {
		return fmt.Errorf("kvcache: %d tokens but %d positions", len(tokens), len(pos))
	}
	if len(cells) < len(tokens) {
		return fmt.Errorf("kvcache: cells has room for %d of %d tokens", len(cells), len(tokens))
	}
	if err := c.CheckReserve(pos, seqs); err != nil {
		return err
	}
	c.reserve(tokens, pos, seqs, cells)
	return nil
}

// reserve is Reserve once CheckReserve has passed.
func (c *Manager) reserve(tokens, pos []int32, seqs [][]int32, cells []int32) {
	for i, p := range pos {
		ss := seqs[i]
		first := ss[0]
		k := int32(len(ss))
		sq := &c.seqs[first]
		n := sq.n
		off := n % c.bs
		var b int32
		if off == 0 {
			b = c.alloc()
			c.hold(b, k)
			for _, s := range ss {
				c.seqs[s].table = append(c.seqs[s].table, b)
			}
		} else {
			bi := len(sq.table) - 1
			b = sq.table[bi]
			if c.ref[b] > k {
				nb := c.alloc()
				c.copyCells(b, nb, off)
				c.split(b, nb, k)
				for _, s := range ss {
					c.seqs[s].table[bi] = nb
				}
				b = nb
			} else if c.hashed[b] {
				c.unhash(b) // overwriting a cell of a block that was full (after a suffix removal)
			}
		}
		cell := b*c.bs + off
		c.cells.set(cell, p, tokens[i])
		cells[i] = cell
		for _, s := range ss {
			st := &c.seqs[s]
			st.n++
			st.posMax = p
			if n == 0 {
				st.posMin = p
			}
		}
		if off == c.bs-1 {
			c.hashBlock(int(first), len(sq.table)-1)
		}
	}
}

// ForgetCells drops the prefix-cache hashes of the blocks holding cells, so their content is
// never handed to another sequence. Call it when the forward pass that was to write K/V for
// cells (as returned by Reserve) failed; the sequences still hold the cells until SeqRemove.
// Their blocks are never hashed nor copied by a partial match again until they are reallocated.
// Out-of-range cells are ignored.
func (c *Manager) ForgetCells(cells []int32) {
	c.gen++
	for _, cell := range cells {
		if !c.cells.in(cell) {
			continue
		}
		b := cell / c.bs
		c.markStale(b) // nor copied by a partial match while a sequence still holds it
		if !c.hashed[b] && c.part[b] == 0 {
			continue
		}
		if c.evq.has(b) { // an indexed full block or a kept partial one
			c.uncache(b)
		} else {
			c.unhash(b)
		}
	}
}

// errUnsupported marks operations this cache does not implement (e.g. a partial SeqCopy).
var errUnsupported = errors.New("unsupported")
