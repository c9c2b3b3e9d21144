package recstate

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"ubatch/kvcache"
)

// TestRandomOps runs random sequence operations (start from a prefix hit, prompt chunks, decode,
// seq_cp, cut back to any earlier position, a range with a hole, a failed step, free) against
// the fake runner under tight and loose budgets, checking after each that every live state is
// its sequence's history and the pool's invariants hold (no referenced snapshot evicted).
func TestRandomOps(t *testing.T) {
	salts := []kvcache.Salt{{}, kvcache.NewSalt("tenant")}
	for _, tc := range []struct {
		name   string
		slots  int
		policy Policy
	}{
		{name: "tight default", slots: 3, policy: Policy{Every: 2, Branch: true, PromptEnd: true, Tail: true}},
		{name: "loose every block", slots: 64, policy: Policy{Every: 1}},
		{name: "tail only", slots: 5, policy: Policy{Tail: true}},
		{name: "none", slots: 0, policy: DefaultPolicy},
		{name: "branch", slots: 8, policy: Policy{Every: 3, Branch: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const nSeq, bs = 4, 4
			h := newHarness(t, Config{MaxSeqs: nSeq, BlockSize: bs, StateBytes: 10, Budget: int64(tc.slots) * 10, Policy: tc.policy})
			rng := rand.New(rand.NewPCG(7, uint64(tc.slots)))
			hist := make([][]int32, nSeq) // per sequence, its history and the prompt tokens still to come
			bases := [][]int32{tokens(1, 40), tokens(2, 40)}
			var hits, cuts int
			for range 4000 {
				s := rng.IntN(nSeq)
				live := h.m.Live(s)
				switch op := rng.IntN(10); {
				case !live || op == 0:
					h.m.Free(s)
					base := bases[rng.IntN(len(bases))]
					prompt := append(slices.Clone(base[:rng.IntN(len(base))]), tokens(rng.IntN(1<<20), 1+rng.IntN(12))...)
					hist[s] = prompt
					if hit := h.start(s, salts[rng.IntN(2)], prompt, rng.IntN(len(prompt)+1)); hit > 0 {
						hits++
					}
				case op <= 3 && h.m.Pos(s) < len(hist[s]):
					p := h.m.Pos(s)
					h.prefill(s, hist[s], p+1+rng.IntN(len(hist[s])-p), 1+rng.IntN(9))
				case op <= 5:
					if h.m.Pos(s) < len(hist[s]) {
						break
					}
					tok := int32(rng.IntN(1000))
					hist[s] = append(hist[s], tok)
					h.advance(s, []int32{tok})
				case op == 6:
					d := rng.IntN(nSeq)
					if err := h.m.Copy(s, d); err != nil {
						t.Fatal(err)
					}
					h.root[d] = h.root[s]
					hist[d] = slices.Clone(hist[s])
					h.flush()
				case op == 7:
					pos := h.m.Pos(s)
					p0 := rng.IntN(pos + 1)
					if p1 := p0 + 1 + rng.IntN(3); p1 < pos {
						if _, err := h.m.Remove(s, int32(p0), int32(p1)); !errors.Is(err, ErrHole) {
							t.Fatalf("Remove(%d, %d, %d) of %d: %v, want ErrHole", s, p0, p1, pos, err)
						}
						if ops := h.m.TakeOps(nil); len(ops) > 0 {
							t.Fatalf("a refused Remove left ops %v", ops)
						}
						break
					}
					c, err := h.m.Remove(s, int32(p0), -1)
					if err != nil {
						t.Fatal(err)
					}
					if p0 == pos && (c.Pos != pos || c.Recompute != 0) {
						t.Fatalf("Remove at the end gave %+v", c)
					}
					if c.Pos > p0 || c.Pos%bs != 0 && c.Pos != pos || c.Pos+c.Recompute != p0 && p0 < pos {
						t.Fatalf("Remove(%d, %d, -1) of %d: %+v", s, p0, pos, c)
					}
					cuts++
					// The history after p0 may go another way: the recomputed part stays.
					hist[s] = append(hist[s][:p0], tokens(rng.IntN(1<<20), rng.IntN(6))...)
					h.flush()
				case op == 8:
					h.r.seqs[s].toks = append(h.r.seqs[s].toks, -1) // a failed forward pass's garbage
					c, err := h.m.Lost(s)
					if err != nil {
						t.Fatal(err)
					}
					if c.Pos+c.Recompute != h.m.Pos(s)+c.Recompute || c.Pos%bs != 0 {
						t.Fatalf("Lost: %+v", c)
					}
					h.flush()
				default:
					h.m.Free(s)
					h.flush()
					hist[s] = nil
					continue
				}
				for q := range nSeq {
					if h.m.Live(q) {
						h.checkState(q, hist[q])
					}
				}
				h.checkInvariants()
			}
			st := h.m.Stats()
			t.Logf("hits %d, cuts %d, %+v", hits, cuts, st)
			if tc.slots > 0 && (hits == 0 || st.Saves == 0) {
				t.Fatalf("the test exercised no prefix hit or save: hits %d, %+v", hits, st)
			}
			if tc.slots > 0 && tc.slots <= 3 && st.Evictions == 0 {
				t.Fatalf("a tight budget never evicted: %+v", st)
			}
		})
	}
}
