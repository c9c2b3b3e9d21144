package recstate

import (
	"fmt"
	"slices"
	"testing"

	"ubatch/kvcache"
)

// fakeState is a reference state: the exact history it summarizes (its salt's root and every
// token), as a real state is a function of that history. A wrong or stale snapshot, a copy from
// the wrong sequence or a missed clear all show as a history that differs from the sequence's.
type fakeState struct {
	root kvcache.Key
	toks []int32
	set  bool
}

func (s fakeState) equal(o fakeState) bool {
	return s.set == o.set && s.root == o.root && slices.Equal(s.toks, o.toks)
}

// fakeRunner applies a Manager's ops to fake states, as the runner applies them to real ones.
type fakeRunner struct {
	seqs  []fakeState
	snaps []fakeState
}

func newFakeRunner(m *Manager) *fakeRunner {
	return &fakeRunner{seqs: make([]fakeState, m.Config().MaxSeqs), snaps: make([]fakeState, m.Slots())}
}

func (r *fakeRunner) apply(ops []Op) error {
	for _, op := range ops {
		switch op.Kind {
		case OpClear:
			r.seqs[op.Seq] = fakeState{set: true}
		case OpCopy:
			src := r.seqs[op.Src]
			r.seqs[op.Seq] = fakeState{root: src.root, toks: slices.Clone(src.toks), set: src.set}
		case OpLoad:
			s := r.snaps[op.Snap]
			if !s.set {
				return fmt.Errorf("OpLoad of slot %d, never saved", op.Snap)
			}
			r.seqs[op.Seq] = fakeState{root: s.root, toks: slices.Clone(s.toks), set: true}
		case OpSave:
			s := r.seqs[op.Seq]
			r.snaps[op.Snap] = fakeState{root: s.root, toks: slices.Clone(s.toks), set: s.set}
		default:
			return fmt.Errorf("unknown op %+v", op)
		}
	}
	return nil
}

// step is a forward pass: seq's state consumes toks.
func (r *fakeRunner) step(seq int, toks []int32) {
	r.seqs[seq].toks = append(r.seqs[seq].toks, toks...)
}

// harness drives a Manager and a fakeRunner together for one test.
type harness struct {
	t    testing.TB
	m    *Manager
	r    *fakeRunner
	root []kvcache.Key // per sequence, its salt's root (the fake state's first field)
}

func newHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, m: m, r: newFakeRunner(m), root: make([]kvcache.Key, cfg.MaxSeqs)}
}

func (h *harness) flush() {
	h.t.Helper()
	ops := h.m.TakeOps(nil)
	if err := h.r.apply(ops); err != nil {
		h.t.Fatal(err)
	}
	// A real state has no salt; the fake one records it, so that a load of another salt's
	// snapshot shows: a cleared state starts from its sequence's root.
	for _, op := range ops {
		if op.Kind == OpClear {
			h.r.seqs[op.Seq].root = h.root[op.Seq]
		}
	}
}

// start starts seq and sets the fake state's root (a Clear op knows no salt: the runner's real
// state has none; the fake one records it to tell salts apart).
func (h *harness) start(seq int, salt kvcache.Salt, prompt []int32, cached int) int {
	h.t.Helper()
	hit, err := h.m.Start(seq, salt, prompt, cached)
	if err != nil {
		h.t.Fatal(err)
	}
	h.root[seq] = salt.Key
	h.flush()
	return hit
}

// advance runs a step of toks for seq in both.
func (h *harness) advance(seq int, toks []int32) {
	h.t.Helper()
	h.flush()
	h.r.step(seq, toks)
	if err := h.m.Advance(seq, toks); err != nil {
		h.t.Fatal(err)
	}
	h.flush()
}

// prefill runs prompt[Pos:end] for seq in chunks of at most chunk tokens, cut by ChunkEnd, and
// returns the number of steps.
func (h *harness) prefill(seq int, prompt []int32, end, chunk int) int {
	h.t.Helper()
	steps := 0
	for p := h.m.Pos(seq); p < end; p = h.m.Pos(seq) {
		e := h.m.ChunkEnd(seq, min(p+chunk, end))
		if e <= p || e > min(p+chunk, end) {
			h.t.Fatalf("ChunkEnd(%d, %d) at %d = %d", seq, min(p+chunk, end), p, e)
		}
		h.advance(seq, prompt[p:e])
		steps++
	}
	return steps
}

// checkState fails unless seq's fake state is the history hist[:Pos].
func (h *harness) checkState(seq int, hist []int32) {
	h.t.Helper()
	want := fakeState{root: h.root[seq], toks: hist[:h.m.Pos(seq)], set: true}
	if got := h.r.seqs[seq]; !got.equal(want) {
		h.t.Fatalf("sequence %d at %d: state has %d tokens (root %x), want %d (root %x), first difference at %d",
			seq, h.m.Pos(seq), len(got.toks), got.root[:4], len(want.toks), want.root[:4], firstDiff(got.toks, want.toks))
	}
}

func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// checkInvariants checks the pool against the sequences and the runner's slots: references are
// exactly the live sequences' anchors, an anchor is a snapshot of its sequence's own history,
// the LRU list holds exactly the unreferenced snapshots, and every snapshot's Key names the
// history the runner saved in its slot.
func (h *harness) checkInvariants() {
	h.t.Helper()
	m, p := h.m, &h.m.snap
	refs := make([]int32, len(p.ref))
	for s := range m.seqs {
		sq := &m.seqs[s]
		if !sq.live {
			if sq.anchor >= 0 {
				h.t.Fatalf("free sequence %d anchored on %d", s, sq.anchor)
			}
			continue
		}
		if int(sq.pos) != len(sq.keys)*int(m.bs)+len(sq.part) {
			h.t.Fatalf("sequence %d at %d with %d keys and %d part", s, sq.pos, len(sq.keys), len(sq.part))
		}
		if a := sq.anchor; a >= 0 {
			refs[a]++
			i := int(p.pos[a]/m.bs) - 1
			if !p.live[a] || p.pos[a] > sq.pos || i < 0 || sq.keys[i] != p.key[a] {
				h.t.Fatalf("sequence %d at %d anchored on slot %d (live %v, at %d): not of its history", s, sq.pos, a, p.live[a], p.pos[a])
			}
		}
	}
	inList := make([]bool, len(p.ref))
	for id, n := p.head, 0; id >= 0; id, n = p.next[id], n+1 {
		if n > len(p.ref) {
			h.t.Fatal("LRU list has a cycle")
		}
		inList[id] = true
	}
	for id := range p.ref {
		if p.ref[id] != refs[id] {
			h.t.Fatalf("slot %d: ref %d, %d anchors", id, p.ref[id], refs[id])
		}
		if want := p.live[id] && p.ref[id] == 0; inList[id] != want {
			h.t.Fatalf("slot %d: in LRU list %v, want %v", id, inList[id], want)
		}
		if !p.live[id] {
			continue
		}
		if p.byKey[p.key[id]] != int32(id) {
			h.t.Fatalf("slot %d not its key's entry", id)
		}
		s := h.r.snaps[id]
		keys := kvcache.ChainKeysFrom(nil, s.root, s.toks, int(m.bs))
		if int(p.pos[id]) != len(s.toks) || len(keys) == 0 || keys[len(keys)-1] != p.key[id] {
			h.t.Fatalf("slot %d at %d: runner saved %d tokens of another history", id, p.pos[id], len(s.toks))
		}
	}
	if len(p.byKey)+len(p.free) != len(p.ref) {
		h.t.Fatalf("%d snapshots + %d free slots != %d slots", len(p.byKey), len(p.free), len(p.ref))
	}
}

// tokens returns n pseudo-random tokens of a small vocabulary, from seed.
func tokens(seed, n int) []int32 {
	t := make([]int32, n)
	x := uint32(seed)*2654435761 + 1
	for i := range t {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		t[i] = int32(x % 1000)
	}
	return t
}
