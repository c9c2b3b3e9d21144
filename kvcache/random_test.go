package kvcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"ubatch/quant"
)

// refModel is the reference for the randomized test: what each sequence sees, as a plain list of
// entries in history order, plus a lineage id telling which sequences are known to share their
// whole history (and may therefore be decoded together).
type refModel struct {
	seqs    [][]entry
	lineage []int
	nextLin int
}

func (m *refModel) fresh(s int) {
	m.nextLin++
	m.lineage[s] = m.nextLin
}

func posMax(es []entry) int32 {
	p := int32(-1)
	for _, e := range es {
		p = max(p, e.Pos)
	}
	return p
}

// kOf is the key a forward pass would compute for token tok at pos after history: a function of
// the whole visible history, as real attention output is. It stays small so that shifts and F16
// storage keep it exact.
func kOf(history []entry, pos, tok int32) float32 {
	h := uint32(2166136261)
	mix := func(v int32) {
		for range 4 {
			h ^= uint32(v) & 0xff
			h *= 16777619
			v >>= 8
		}
	}
	for _, e := range history {
		mix(e.Pos)
		mix(e.Tok)
	}
	mix(pos)
	mix(tok)
	return float32(h&0x3ff) + 1
}

type randTest struct {
	t     *testing.T
	rng   *rand.Rand
	c     *Cache
	m     refModel
	docs  [][]int32
	doc   []int // per seq: the document its tokens follow, so prompts repeat and prefixes hit
	log   []string
	stats map[string]int // outcome counts, logged to show what the run exercised
}

func (r *randTest) fatalf(format string, args ...any) {
	r.t.Helper()
	tail := r.log[max(0, len(r.log)-15):]
	r.t.Fatalf("%s\nlast operations:\n  %s", fmt.Sprintf(format, args...), fmt.Sprint(tail))
}

func (r *randTest) check() {
	r.t.Helper()
	for s := range r.m.seqs {
		got := visible(r.t, r.c, s)
		if !slices.Equal(got, r.m.seqs[s]) {
			r.fatalf("seq %d sees\n  %v\nreference\n  %v", s, got, r.m.seqs[s])
		}
		if r.c.SeqPosMax(s) != posMax(r.m.seqs[s]) {
			r.fatalf("seq %d: SeqPosMax %d, reference %d", s, r.c.SeqPosMax(s), posMax(r.m.seqs[s]))
		}
	}
	checkInvariants(r.t, r.c)
	r.checkShareable()
	if st := r.c.Stats(); st.Shared > 0 {
		r.stats["checks with shared blocks"]++
	}
}

// checkShareable checks what prefix matches hand to new sequences: in every live sequence, the
// cells of its hashed blocks on a hashed chain from its start, and the leading cells at
// canonical positions of the (not stale) block after them, hold what a fresh decode of the same
// tokens computes (kOf of the canonical history).
func (r *randTest) checkShareable() {
	r.t.Helper()
	c := r.c
	for s := range c.seqs {
		sq := &c.seqs[s]
		var hist []entry
		for bi, b := range sq.table {
			open := !c.hashed[b]
			if open && c.stale[b] {
				break
			}
			for j := range c.bs {
				i := int32(bi)*c.bs + j
				if i >= sq.n {
					break
				}
				cell := b*c.bs + j
				if c.cells.pos(cell) != i {
					// Not a canonical run from the start: a hashed block here was shared into
					// a later slot by a range copy, matched by its content, not by this chain.
					open = true
					break
				}
				k, err := readKV(c, cell)
				if err != nil {
					r.fatalf("seq %d: %v", s, err)
				}
				if want := kOf(hist, i, c.cells.tok(cell)); k != want {
					r.fatalf("seq %d slot %d (block %d, hashed %v): K %g, a fresh decode gives %g", s, i, b, !open, k, want)
				}
				hist = append(hist, entry{i, c.cells.tok(cell), k, -k})
			}
			if open {
				break
			}
		}
	}
}

// expectFailure checks that an operation failed, with ErrKVFull or with another error as
// wantFull says, and changed nothing.
func (r *randTest) expectFailure(what string, err error, before snapshot, wantFull bool) {
	r.t.Helper()
	if err == nil {
		r.fatalf("%s: succeeded, want an error", what)
	}
	if errors.Is(err, ErrKVFull) != wantFull {
		r.fatalf("%s: error %v (ErrKVFull wanted: %v)", what, err, wantFull)
	}
	if !before.equal(takeSnapshot(r.c)) {
		r.fatalf("%s: failed with %v but changed the cache", what, err)
	}
}

func (r *randTest) randSeq() int { return r.rng.IntN(len(r.m.seqs)) }

// randPos is a position around seq's range, sometimes -1 (meaning "unbounded" in ranges).
func (r *randTest) randPos(s int) int32 {
	if r.rng.IntN(5) == 0 {
		return -1
	}
	return int32(r.rng.IntN(int(posMax(r.m.seqs[s])) + 4))
}

func (r *randTest) tokenFor(s int, pos int32) int32 {
	if r.rng.IntN(12) == 0 {
		return int32(r.rng.IntN(50))
	}
	d := r.docs[r.doc[s]]
	return d[int(pos)%len(d)]
}

// opReserve decodes a micro-batch of one to three runs, each a few tokens for one sequence or
// for a group known to share its history.
func (r *randTest) opReserve() {
	var toks, pos []int32
	var seqs [][]int32
	next := slices.Clone(r.m.seqs) // the reference state after the runs planned so far
	lin := slices.Clone(r.m.lineage)
	var keys []float32
	// A sequence leaving, within this micro-batch, a group it was decoded with earlier in it may
	// be refused (when that needs a copy of a block holding this batch's tokens).
	lastGroup := map[int32][]int32{}
	diverges := false
	for range 1 + r.rng.IntN(3) {
		s := r.randSeq()
		group := []int32{int32(s)}
		for o := range next {
			if o != s && r.rng.IntN(3) == 0 && (lin[o] == lin[s] || len(next[o])+len(next[s]) == 0) {
				group = append(group, int32(o))
			}
		}
		for _, o := range group {
			for _, x := range lastGroup[o] {
				diverges = diverges || !slices.Contains(group, x)
			}
		}
		for _, o := range group {
			lastGroup[o] = group
		}
		p := posMax(next[s]) + 1
		if len(next[s]) == 0 {
			p = int32(r.rng.IntN(2)) * int32(r.rng.IntN(6))
			r.doc[s] = r.rng.IntN(len(r.docs))
			for _, o := range group {
				r.doc[o] = r.doc[s]
			}
		}
		r.m.nextLin++
		for range 1 + r.rng.IntN(6) {
			tok := r.tokenFor(s, p)
			k := kOf(next[s], p, tok)
			for _, o := range group {
				next[o] = append(slices.Clone(next[o]), entry{p, tok, k, -k})
				lin[o] = r.m.nextLin
			}
			toks, pos, seqs, keys = append(toks, tok), append(pos, p), append(seqs, group), append(keys, k)
			p++
		}
	}
	r.log = append(r.log, fmt.Sprintf("Reserve(pos %v seqs %v)", pos, seqs))
	before := takeSnapshot(r.c)
	can := r.c.CanReserve(pos, seqs)
	cells := make([]int32, len(toks))
	err := r.c.Reserve(toks, pos, seqs, cells)
	if can != (err == nil) {
		r.fatalf("CanReserve %v but Reserve error %v", can, err)
	}
	if err != nil {
		full := errors.Is(err, ErrKVFull)
		if !full && (!diverges || !strings.Contains(err.Error(), "diverges")) {
			r.fatalf("Reserve: %v", err)
		}
		r.expectFailure("Reserve", err, before, full)
		r.stats[map[bool]string{true: "reserve full", false: "reserve diverge"}[full]]++
		return
	}
	r.stats["reserve ok"]++
	for i, cell := range cells {
		writeKV(r.c, cell, keys[i])
	}
	r.m.seqs, r.m.lineage = next, lin
}

// opReserveInvalid decodes one token at a wrong position, or for two sequences whose visible
// histories differ; both must be refused without change.
func (r *randTest) opReserveInvalid() {
	s := r.randSeq()
	if len(r.m.seqs[s]) == 0 {
		return
	}
	group := []int32{int32(s)}
	p := posMax(r.m.seqs[s]) + 1
	if o := r.randSeq(); o != s && !slices.Equal(r.m.seqs[o], r.m.seqs[s]) && r.rng.IntN(2) == 0 {
		group = append(group, int32(o))
	} else {
		p += 1 + int32(r.rng.IntN(3))
	}
	r.log = append(r.log, fmt.Sprintf("invalid Reserve(pos %d seqs %v)", p, group))
	before := takeSnapshot(r.c)
	err := r.c.Reserve([]int32{1}, []int32{p}, [][]int32{group}, make([]int32, 1))
	r.expectFailure("invalid Reserve", err, before, false)
}

func (r *randTest) opRemove() {
	s := r.randSeq()
	p0, p1 := r.randPos(s), r.randPos(s)
	target := s
	if r.rng.IntN(5) == 0 {
		target = -1
	}
	r.log = append(r.log, fmt.Sprintf("SeqRemove(%d, %d, %d)", target, p0, p1))
	before := takeSnapshot(r.c)
	if err := r.c.SeqRemove(target, p0, p1); err != nil {
		r.expectFailure("SeqRemove", err, before, true)
		r.stats["remove full"]++
		return
	}
	r.stats["remove ok"]++
	rg := makeRange(p0, p1)
	for o := range r.m.seqs {
		if target >= 0 && o != target {
			continue
		}
		kept := slices.DeleteFunc(slices.Clone(r.m.seqs[o]), func(e entry) bool { return rg.has(e.Pos) })
		if len(kept) != len(r.m.seqs[o]) {
			r.m.seqs[o] = kept
			r.m.fresh(o)
		}
	}
}

// opCopy copies a random range, a prefix or any other: dst must see exactly src's cells in the
// range, in src's order.
func (r *randTest) opCopy() {
	src, dst := r.randSeq(), r.randSeq()
	p0, p1 := int32(-1), r.randPos(src)
	if r.rng.IntN(3) == 0 {
		p0 = r.randPos(src)
	}
	r.log = append(r.log, fmt.Sprintf("SeqCopy(%d, %d, %d, %d)", src, dst, p0, p1))
	before := takeSnapshot(r.c)
	err := r.c.SeqCopy(src, dst, p0, p1)
	rg := makeRange(p0, p1)
	es := r.m.seqs[src]
	kept := slices.DeleteFunc(slices.Clone(es), func(e entry) bool { return !rg.has(e.Pos) })
	switch {
	case src == dst:
		if err != nil {
			r.fatalf("SeqCopy onto itself: %v", err)
		}
	case len(r.m.seqs[dst]) > 0:
		r.expectFailure("SeqCopy to a non-empty sequence", err, before, false)
	case rg.empty() || len(kept) == 0:
		if err != nil || !before.equal(takeSnapshot(r.c)) {
			r.fatalf("no-op SeqCopy: %v", err)
		}
	case errors.Is(err, ErrKVFull):
		r.expectFailure("SeqCopy", err, before, true)
		r.stats["copy full"]++
	case err != nil:
		r.fatalf("SeqCopy: %v", err)
	default:
		r.m.seqs[dst] = kept
		r.doc[dst] = r.doc[src]
		if len(kept) == len(es) {
			r.m.lineage[dst] = r.m.lineage[src] // every block shared: they may decode together
		} else {
			r.m.fresh(dst)
		}
		if len(kept) != len(es) || rg.p0 > 0 {
			r.stats["copy of a range"]++
		}
	}
}

// opDiv divides a random range's positions by 1-4 (0: an error that changes nothing).
func (r *randTest) opDiv() {
	s := r.randSeq()
	p0, p1 := r.randPos(s), r.randPos(s)
	d := int32(r.rng.IntN(5))
	r.log = append(r.log, fmt.Sprintf("SeqDiv(%d, %d, %d, %d)", s, p0, p1, d))
	before := takeSnapshot(r.c)
	err := r.c.SeqDiv(s, p0, p1, d)
	if d == 0 {
		r.expectFailure("SeqDiv by 0", err, before, false)
		return
	}
	if err != nil {
		r.expectFailure("SeqDiv", err, before, true)
		r.stats["div full"]++
		return
	}
	r.stats["div ok"]++
	rg := makeRange(p0, p1)
	r.moveRef(s, func(p int32) int32 {
		if rg.has(p) {
			return p / d
		}
		return p
	})
}

func (r *randTest) opShift() {
	s := r.randSeq()
	p0, p1 := r.randPos(s), r.randPos(s)
	delta := int32(r.rng.IntN(11) - 5)
	r.log = append(r.log, fmt.Sprintf("SeqShift(%d, %d, %d, %d)", s, p0, p1, delta))
	before := takeSnapshot(r.c)
	if err := r.c.SeqShift(s, p0, p1, delta); err != nil {
		r.expectFailure("SeqShift", err, before, true)
		r.stats["shift full"]++
		return
	}
	r.stats["shift ok"]++
	rg := makeRange(p0, p1)
	if delta == 0 || rg.empty() {
		return
	}
	r.moveRef(s, func(p int32) int32 {
		if rg.has(p) {
			return p + delta // below 0: the cell goes
		}
		return p
	})
}

// moveRef applies an operation's move to seq s's reference entries: move maps a position to
// its new one (the same: the entry stays as it is; below 0: it goes), and a moved entry's key
// moves with its position, as a rotation does. When any entry moved or went, s's history is
// known to be shared with no other sequence's (a new lineage).
func (r *randTest) moveRef(s int, move func(pos int32) int32) {
	var out []entry
	changed := false
	for _, e := range r.m.seqs[s] {
		np := move(e.Pos)
		if np != e.Pos {
			changed = true
			if np < 0 {
				continue
			}
			e.K += float32(np - e.Pos)
			e.Pos = np
		}
		out = append(out, e)
	}
	if changed {
		r.m.seqs[s] = out
		r.m.fresh(s)
	}
}

func (r *randTest) opAttach() {
	s := r.randSeq()
	doc := r.rng.IntN(len(r.docs))
	d := r.docs[doc]
	r.attach(s, d[:r.rng.IntN(len(d)+1)], doc)
}

// attach runs AttachPrefix(s, toks) and checks it against MatchPrefix and, through the next
// check, against a fresh decode of the attached tokens; doc is the document toks follow.
func (r *randTest) attach(s int, toks []int32, doc int) {
	r.log = append(r.log, fmt.Sprintf("AttachPrefix(%d, %d tokens)", s, len(toks)))
	match := r.c.MatchPrefix(toks)
	src, m := r.c.match(rootHash, toks)
	fromKept := m > 0 && r.c.part[src] > 0
	before := takeSnapshot(r.c)
	n, err := r.c.AttachPrefix(s, toks)
	if len(r.m.seqs[s]) > 0 {
		r.expectFailure("AttachPrefix", err, before, false)
		return
	}
	if n > 0 {
		r.stats["attach hit"]++
	}
	if n%int(r.c.bs) != 0 {
		r.stats["attach partial"]++
		if fromKept {
			r.stats["attach from a kept partial block"]++
		}
	}
	if err != nil || n != match || n > len(toks) {
		r.fatalf("AttachPrefix = %d, %v; MatchPrefix said %d", n, err, match)
	}
	var es []entry
	for i := range int32(n) {
		k := kOf(es, i, toks[i])
		es = append(es, entry{i, toks[i], k, -k})
	}
	r.m.seqs[s] = es
	r.m.fresh(s)
	r.doc[s] = doc
}

func (r *randTest) opFree() {
	s := r.randSeq()
	switch r.rng.IntN(6) {
	case 0:
		r.log = append(r.log, fmt.Sprintf("SeqKeep(%d)", s))
		r.c.SeqKeep(s)
		for o := range r.m.seqs {
			if o != s {
				r.m.seqs[o] = nil
				r.m.fresh(o)
			}
		}
	case 1:
		r.log = append(r.log, "Clear")
		r.c.Clear()
		for o := range r.m.seqs {
			r.m.seqs[o] = nil
			r.m.fresh(o)
		}
	default:
		r.log = append(r.log, fmt.Sprintf("SeqFree(%d)", s))
		fresh := r.freshHistory(s)
		r.c.SeqFree(s)
		r.checkFreedMatchable(s, fresh)
		r.m.seqs[s] = nil
		r.m.fresh(s)
	}
}

// weightedOp is an operation of a random run, chosen when the run's draw x (0 to 99) is below
// upTo and no earlier one's upTo.
type weightedOp struct {
	upTo int
	op   func(*randTest)
}

// randomRun is a randomized test against the reference: per seed, a cache of cfg (four
// sequences, MaxSeqs 4) and the reference, three documents of 16-31 tokens, then ops operations
// drawn from mix, each followed by check. The outcomes in want must all have happened in the
// run, or it checked nothing of what it is for.
type randomRun struct {
	seeds  int
	stream uint64 // the PCG stream of the seeds' generators
	cfg    Config
	ops    int
	mix    []weightedOp
	want   []string
	setup  func(r *randTest) // before the documents are drawn; nil for none
	done   func(r *randTest) // after a seed's operations; nil for none
}

func (rr randomRun) run(t *testing.T) {
	stats := map[string]int{}
	defer func() {
		t.Logf("outcomes: %v", stats)
		for _, k := range rr.want {
			if stats[k] == 0 {
				t.Errorf("no %q in the run", k)
			}
		}
	}()
	for seed := range uint64(rr.seeds) {
		rng := rand.New(rand.NewPCG(seed, rr.stream))
		const nSeq = 4
		r := &randTest{
			t:   t,
			rng: rng,
			c:   newCache(t, rr.cfg),
			m:   refModel{seqs: make([][]entry, nSeq), lineage: make([]int, nSeq)},
			doc: make([]int, nSeq),
		}
		if rr.setup != nil {
			rr.setup(r)
		}
		for range 3 {
			d := make([]int32, 16+rng.IntN(16))
			for i := range d {
				d[i] = int32(rng.IntN(50))
			}
			r.docs = append(r.docs, d)
		}
		r.stats = stats
		for s := range nSeq {
			r.m.fresh(s)
		}
		for range rr.ops {
			x := rng.IntN(100)
			i := slices.IndexFunc(rr.mix, func(o weightedOp) bool { return x < o.upTo })
			rr.mix[i].op(r)
			r.check()
		}
		if rr.done != nil {
			rr.done(r)
		}
	}
}

func TestRandomOpsAgainstReference(t *testing.T) {
	tests := []struct {
		name  string
		dtype quant.Type
		seeds int
		ops   int
	}{
		{name: "f32", dtype: quant.F32, seeds: 20, ops: 300},
		{name: "f16", dtype: quant.F16, seeds: 5, ops: 300},
	}
	for _, tc := range tests {
		t.Run(tc.name, randomRun{
			seeds:  tc.seeds,
			stream: 0x5eed,
			cfg:    Config{NLayers: 2, KVDim: 2, BlockSize: 4, NumBlocks: 18, MaxSeqs: 4, DType: tc.dtype},
			ops:    tc.ops,
			mix: []weightedOp{
				{40, (*randTest).opReserve},
				{45, (*randTest).opReserveInvalid},
				{60, (*randTest).opRemove},
				{70, (*randTest).opCopy},
				{72, (*randTest).opShift},
				{75, (*randTest).opDiscard},
				{80, (*randTest).opDiv},
				{88, (*randTest).opAttach},
				{92, (*randTest).opTurn},
				{100, (*randTest).opFree},
			},
			want: []string{"attach partial", "attach from a kept partial block", "freed partial block matched", "discard ok"},
		}.run)
	}
}
