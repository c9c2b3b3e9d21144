package kvcache

import (
	"fmt"
	"slices"
)

// The randomized test's operations for context shifts and kept partial blocks.

// opDiscard is a context shift: the cells at positions [p0, p1) go, later ones move down by
// p1-p0 (keys by -(p1-p0)), and the sequence is compacted: its length is its slots before the
// first one that went (or was a hole), plus the survivors after it.
func (r *randTest) opDiscard() {
	s := r.randSeq()
	top := posMax(r.m.seqs[s]) + 3
	p0 := int32(r.rng.IntN(int(top)))
	p1 := p0 + 1 + int32(r.rng.IntN(int(top-p0)))
	r.log = append(r.log, fmt.Sprintf("SeqDiscard(%d, %d, %d)", s, p0, p1))
	rg := posRange{p0, p1}
	wantN, first := int32(0), int32(-1)
	for i := range r.c.seqs[s].n {
		p := r.c.cells.pos(r.c.cellOf(s, i))
		switch {
		case p < 0 || rg.has(p):
			if first < 0 {
				first = i
			}
		default:
			wantN++
		}
	}
	if first < 0 {
		wantN = r.c.seqs[s].n
	}
	before := takeSnapshot(r.c)
	if err := r.c.SeqDiscard(s, p0, p1); err != nil {
		r.expectFailure("SeqDiscard", err, before, true)
		r.stats["discard full"]++
		return
	}
	r.stats["discard ok"]++
	if got := r.c.seqs[s].n; got != wantN {
		r.fatalf("SeqDiscard: seq %d has %d cells, want %d (compacted)", s, got, wantN)
	}
	r.moveRef(s, func(p int32) int32 {
		switch {
		case rg.has(p):
			return -1
		case p >= p1:
			return p - (p1 - p0)
		}
		return p
	})
}

// opTurn is the next turn of a chat: a sequence with a fresh history is freed and its tokens, or
// a prefix of them, attached again (to it or another empty sequence), followed by a few new ones
// sometimes. Its last, partly filled block must come back from the cache (kept partial blocks).
func (r *randTest) opTurn() {
	s := r.randSeq()
	toks := r.freshHistory(s)
	if len(toks) == 0 {
		return
	}
	r.log = append(r.log, fmt.Sprintf("SeqFree(%d) for a turn", s))
	r.c.SeqFree(s)
	r.checkFreedMatchable(s, toks)
	r.m.seqs[s] = nil
	r.m.fresh(s)
	next := slices.Clone(toks[:1+r.rng.IntN(len(toks))])
	for range r.rng.IntN(3) {
		next = append(next, int32(r.rng.IntN(50)))
	}
	dst := s
	if o := r.randSeq(); len(r.m.seqs[o]) == 0 {
		dst = o
	}
	r.attach(dst, next, r.doc[s])
}

// freshHistory returns seq's tokens when what it holds is exactly what a fresh decode of them
// from position 0 computes (canonical positions, keys of the canonical history) and none of its
// blocks is stale in the cache (keys re-rotated and back, say); nil otherwise.
func (r *randTest) freshHistory(s int) []int32 {
	var toks []int32
	for i, e := range r.m.seqs[s] {
		if e.Pos != int32(i) || e.K != kOf(r.m.seqs[s][:i], e.Pos, e.Tok) {
			return nil
		}
		toks = append(toks, e.Tok)
	}
	for _, b := range r.c.seqs[s].table {
		if r.c.stale[b] {
			return nil
		}
	}
	return toks
}

// checkFreedMatchable checks that a freed sequence whose history was fresh stays matchable in
// full, its last, partly filled block included (kept, or held by a sibling or a live sequence),
// when a block is available for the copy (two: a cached source cannot be the one evicted).
func (r *randTest) checkFreedMatchable(s int, toks []int32) {
	r.t.Helper()
	if len(toks) == 0 {
		return
	}
	got := r.c.MatchPrefix(toks)
	full := len(toks) / int(r.c.bs) * int(r.c.bs)
	switch {
	case got == len(toks):
		if full != len(toks) {
			r.stats["freed partial block matched"]++
		}
	case got < full || r.c.available()-r.cachedAmong(toks[:full]) >= 2:
		r.fatalf("seq %d freed with a fresh history of %d tokens: MatchPrefix %d, want %d", s, len(toks), got, len(toks))
	}
}

// cachedAmong counts the cached blocks MatchPrefix(toks) attaches (they leave the pool).
func (r *randTest) cachedAmong(toks []int32) int {
	r.c.match(rootHash, toks)
	n := 0
	for _, b := range r.c.matched {
		if r.c.ref[b] == 0 {
			n++
		}
	}
	return n
}
