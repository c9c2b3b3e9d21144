package kvcache

import (
	"fmt"
	"math"
)

// Admission is CanAdmit's answer: what admitting a prompt into an empty sequence would take now.
type Admission struct {
	Cached int // leading prompt tokens the cache provides now (Admit attaches them; never the last one)
	// Need is the number of blocks to allocate for the prompt's uncached part plus the reserve,
	// the copy of a partially matched block included.
	Need int
	// Avail is the number of blocks free or evictable once the matched cached blocks are
	// attached, less Committed.
	Avail int
	// Committed is the number of blocks the live sequences started with Admit are still
	// expected to take as they grow to their prompt plus reserve: admitting only within what is
	// left keeps preemption the exception (a watermark, as vLLM's block manager keeps).
	Committed int
	// Wait is set when a live sequence admitted earlier is still computing blocks this prompt
	// shares with it: admitted a step or two later, the prompt takes them from the cache instead
	// of computing them a second time.
	Wait bool
}

// Fits reports whether Admit may go ahead now: nothing to wait for and the blocks are there.
func (a Admission) Fits() bool { return !a.Wait && a.Need <= a.Avail }

// CanAdmit reports what Admit(seq, prompt, reserve) would take for an empty sequence: the cached
// prefix it would attach, the blocks it needs for the prompt and reserve more cells (the tokens
// it is expected to generate), those available once the live sequences' own expected growth is
// set aside, and whether waiting for a sequence that is computing the same prefix would save
// work. It changes nothing but scratch state. Only blocks of salt count (see Salt).
func (c *Manager) CanAdmit(salt Salt, prompt []int32, reserve int) Admission {
	if len(prompt) == 0 {
		return Admission{}
	}
	attach := prompt[:len(prompt)-1]
	_, m := c.match(c.root(salt), attach)
	full := len(c.matched)
	taken := 0
	for _, b := range c.matched {
		if c.ref[b] == 0 {
			taken++
		}
	}
	a := Admission{Cached: full*int(c.bs) + m, Committed: c.committed()}
	a.Avail = c.available() - taken - a.Committed
	cells := len(prompt) + max(reserve, 0)
	a.Need = max(0, (cells+int(c.bs)-1)/int(c.bs)-full)
	a.Wait = c.inFlight(salt, attach, a.Cached)
	return a
}

// Admit starts the empty sequence seq with prompt: it attaches the longest cached prefix of
// prompt but its last token (whose logits the caller needs, so it is always computed) and
// returns its length, n; the caller then decodes prompt[n:] from position n. prompt is recorded
// as what seq is about to compute, so that CanAdmit can tell later prompts sharing it to wait
// for its blocks; reserve is the cells seq is expected to generate beyond prompt. Check
// CanAdmit first: Admit does not refuse a sequence for want of blocks (its decode would). seq
// is salted salt (AttachPrefixSalt).
func (c *Manager) Admit(seq int, salt Salt, prompt []int32, reserve int) (int, error) {
	if len(prompt) == 0 {
		return 0, fmt.Errorf("kvcache: Admit: empty prompt for sequence %d", seq)
	}
	n, err := c.AttachPrefixSalt(seq, salt, prompt[:len(prompt)-1])
	if err != nil {
		return 0, err
	}
	sq := &c.seqs[seq]
	sq.intent = append(sq.intent[:0], prompt...)
	sq.expect = int32(min(len(prompt)+max(reserve, 0), math.MaxInt32))
	return n, nil
}

// committed counts the blocks live sequences started with Admit still need to reach the length
// they were admitted for (their table grows by one block per BlockSize cells; a shared last
// block is never written by a sequence the scheduler admitted, so no copy is counted).
func (c *Manager) committed() int {
	bs := int(c.bs)
	n := 0
	for s := range c.seqs {
		sq := &c.seqs[s]
		if len(sq.intent) == 0 {
			continue
		}
		n += max(0, (int(sq.expect)+bs-1)/bs-len(sq.table))
	}
	return n
}

// inFlight reports whether a live sequence admitted with Admit is still computing tokens it
// shares with tokens beyond the cached prefix of length cached. Once it has computed them, they
// are in its blocks, full or not, and a partial match copies the rest of the shared block. Only
// a share of at least one whole block is worth a wait, or every prompt sharing just BOS would
// wait for others' first blocks. Only sequences of salt count: another salt's blocks will never
// be shared, and waiting for them would tell the prompt's sender about another tenant's.
func (c *Manager) inFlight(salt Salt, tokens []int32, cached int) bool {
	for s := range c.seqs {
		sq := &c.seqs[s]
		in := sq.intent
		if int(sq.n) >= len(in)-1 || sq.salt != salt {
			continue // computed all it was admitted with but the last token (or not admitted by Admit)
		}
		n := min(len(tokens), len(in))
		common := 0
		for common < n && tokens[common] == in[common] {
			common++
		}
		if common > cached && common >= int(c.bs) && int(sq.n) < common {
			return true
		}
	}
	return false
}
