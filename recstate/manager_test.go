package recstate

import (
	"errors"
	"strings"
	"testing"

	"ubatch/kvcache"
)

func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // substring of the error, "" for none
	}{
		{name: "ok", cfg: Config{MaxSeqs: 4, StateBytes: 100, Budget: 1000}},
		{name: "no budget", cfg: Config{MaxSeqs: 4, StateBytes: 100}},
		{name: "no seqs", cfg: Config{StateBytes: 100}, want: "MaxSeqs"},
		{name: "no state", cfg: Config{MaxSeqs: 1}, want: "StateBytes"},
		{name: "negative budget", cfg: Config{MaxSeqs: 1, StateBytes: 1, Budget: -1}, want: "Budget"},
		{name: "huge budget", cfg: Config{MaxSeqs: 1, StateBytes: 1, Budget: 1 << 40}, want: "lower it"},
		{name: "negative every", cfg: Config{MaxSeqs: 1, StateBytes: 1, Policy: Policy{Every: -1}}, want: "Every"},
		{name: "negative block", cfg: Config{MaxSeqs: 1, StateBytes: 1, BlockSize: -2}, want: "BlockSize"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New(%+v) = %v, want an error with %q", tc.cfg, err, tc.want)
			}
		})
	}
}

// TestMatchEveryOffset saves a snapshot at every boundary of a 5-block prompt, then matches
// prompts that follow it for every length and diverge from it at every offset, inside and
// across blocks, with and without the salt and with kvcache's match cut short.
func TestMatchEveryOffset(t *testing.T) {
	const bs, blocks = 4, 5
	salt := kvcache.NewSalt("s")
	h := newHarness(t, Config{MaxSeqs: 2, BlockSize: bs, StateBytes: 1, Budget: 100, Policy: Policy{Every: 1}})
	base := tokens(3, bs*blocks+3)
	h.start(0, salt, base, 0)
	h.prefill(0, base, len(base), 7)
	h.m.Free(0)
	for _, tc := range []struct {
		name   string
		salt   kvcache.Salt
		cached func(n int) int // kvcache's match for a prompt of n tokens
	}{
		{name: "salted", salt: salt, cached: func(n int) int { return n }},
		{name: "attention short", salt: salt, cached: func(n int) int { return n / 2 }},
		{name: "other salt", salt: kvcache.Salt{}, cached: func(n int) int { return n }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for n := 1; n <= len(base)+2; n++ {
				for d := 0; d <= n; d++ { // the prompt diverges from base at d (d == n: never)
					prompt := append([]int32(nil), base[:min(d, len(base))]...)
					for len(prompt) < n {
						prompt = append(prompt, 5000+int32(len(prompt)))
					}
					c := tc.cached(n)
					want := min(d, n-1, c, len(base)) / bs * bs
					want = min(want, blocks*bs)
					if tc.salt != salt {
						want = 0
					}
					if got := h.m.Match(tc.salt, prompt, c); got != want {
						t.Fatalf("prompt of %d diverging at %d, cached %d: Match = %d, want %d", n, d, c, got, want)
					}
				}
			}
			// A start from the longest hit gives the state of that prefix.
			hit := h.start(1, tc.salt, base, len(base))
			h.checkState(1, base)
			if tc.salt == salt && hit != blocks*bs {
				t.Fatalf("start from the whole prompt: hit %d", hit)
			}
			h.m.Free(1)
		})
	}
}

// TestRemoveEveryPosition cuts a 5-block sequence back to every earlier position and checks the
// snapshot it restores (Every 2 keeps 8 and 16, the tail 20; the tails at 4 and 12 were
// superseded), the tokens to recompute, and the state once they are.
func TestRemoveEveryPosition(t *testing.T) {
	const bs = 4
	prompt := tokens(9, 5*bs)
	for p0 := 0; p0 <= len(prompt); p0++ {
		h := newHarness(t, Config{MaxSeqs: 1, BlockSize: bs, StateBytes: 1, Budget: 10, Policy: Policy{Every: 2, Tail: true}})
		h.start(0, kvcache.Salt{}, prompt, 0)
		h.prefill(0, prompt, len(prompt), 3)
		c, err := h.m.Remove(0, int32(p0), -1)
		if err != nil {
			t.Fatal(err)
		}
		h.flush()
		want := 0
		for _, b := range []int{8, 16, 20} {
			if b <= p0 {
				want = b
			}
		}
		if c.Pos != want || c.Pos+c.Recompute != p0 {
			t.Fatalf("Remove(0, %d, -1): %+v, want Pos %d", p0, c, want)
		}
		h.checkState(0, prompt)
		h.prefill(0, prompt, p0, 16)
		if h.m.Pos(0) != p0 {
			t.Fatalf("recomputed to %d, want %d", h.m.Pos(0), p0)
		}
		h.checkState(0, prompt)
		h.checkInvariants()
	}
}

func TestRefusals(t *testing.T) {
	h := newHarness(t, Config{MaxSeqs: 2, BlockSize: 4, StateBytes: 1, Budget: 4})
	prompt := tokens(1, 10)
	h.start(0, kvcache.Salt{}, prompt, 0)
	h.advance(0, prompt)
	for _, tc := range []struct {
		name string
		do   func() error
		want error
		text string
	}{
		{name: "hole", do: func() error { _, err := h.m.Remove(0, 2, 5); return err }, want: ErrHole},
		{name: "shift", do: func() error { return h.m.Shift(0, 0, 4, -4) }, want: ErrContextShift, text: "--context-shift"},
		{name: "shift bad seq", do: func() error { return h.m.Shift(7, 0, 4, -4) }, text: "outside"},
		{name: "advance free", do: func() error { return h.m.Advance(1, prompt) }, text: "Start it first"},
		{name: "start live", do: func() error { _, err := h.m.Start(0, kvcache.Salt{}, prompt, 0); return err }, text: "Free it first"},
		{name: "copy bad dst", do: func() error { return h.m.Copy(0, 2) }, text: "outside"},
		{name: "remove free", do: func() error { _, err := h.m.Remove(1, 0, -1); return err }, text: "Start it first"},
		{name: "lost bad seq", do: func() error { _, err := h.m.Lost(-1); return err }, text: "outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("got %v, want %v containing %q", err, tc.want, tc.text)
			}
			if ops := h.m.TakeOps(nil); len(ops) > 0 {
				t.Fatalf("a refused call left ops %v", ops)
			}
			if h.m.Pos(0) != len(prompt) {
				t.Fatalf("a refused call moved sequence 0 to %d", h.m.Pos(0))
			}
		})
	}
}

// TestCopy is seq_cp: the copy has the source's state and position, shares its anchor, and both
// go their own way after.
func TestCopy(t *testing.T) {
	h := newHarness(t, Config{MaxSeqs: 2, BlockSize: 4, StateBytes: 1, Budget: 4, Policy: Policy{Every: 1}})
	a := tokens(4, 9)
	h.start(0, kvcache.Salt{}, a, 0)
	h.prefill(0, a, len(a), 16) // cut at 4 and 8, anchored on 8
	if err := h.m.Copy(0, 1); err != nil {
		t.Fatal(err)
	}
	h.root[1] = h.root[0]
	h.flush()
	h.checkState(1, a)
	if h.m.Pos(1) != 9 || h.m.snap.ref[h.m.seqs[0].anchor] != 2 {
		t.Fatalf("copy at %d, anchor refs %d", h.m.Pos(1), h.m.snap.ref[h.m.seqs[0].anchor])
	}
	b := append(append([]int32(nil), a...), 7, 7, 7)
	h.advance(1, b[9:])
	h.advance(0, []int32{8})
	h.checkState(1, b)
	h.checkState(0, append(append([]int32(nil), a...), 8))
	h.checkInvariants()
}

// TestChunkEnd: a prompt chunk ends at the first boundary the policy keeps past Pos.
func TestChunkEnd(t *testing.T) {
	prompt := tokens(2, 50) // blocks of 4: prompt end 48
	for _, tc := range []struct {
		name   string
		policy Policy
		cached int // kvcache's match (the branch, when Policy.Branch)
		pos    int // where the state is before the chunk
		end    int
		want   int
		slots  int // 4, or none when -1
	}{
		{name: "every 2 blocks", policy: Policy{Every: 2}, end: 20, want: 8},
		{name: "from 8", policy: Policy{Every: 2}, pos: 8, end: 20, want: 16},
		{name: "ends before", policy: Policy{Every: 2}, pos: 8, end: 15, want: 15},
		{name: "ends on it", policy: Policy{Every: 2}, pos: 8, end: 16, want: 16},
		{name: "branch", policy: Policy{Every: 4, Branch: true}, cached: 14, end: 40, want: 12},
		{name: "prompt end", policy: Policy{PromptEnd: true}, pos: 30, end: 50, want: 48},
		{name: "tail cuts nothing", policy: Policy{Tail: true}, end: 50, want: 50},
		{name: "end at pos", policy: Policy{Every: 1}, pos: 8, end: 8, want: 8},
		{name: "no slots", policy: Policy{Every: 1}, end: 20, want: 20, slots: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			budget := int64(4)
			if tc.slots < 0 {
				budget = 0
			}
			h := newHarness(t, Config{MaxSeqs: 1, BlockSize: 4, StateBytes: 1, Budget: budget, Policy: tc.policy})
			h.start(0, kvcache.Salt{}, prompt, tc.cached)
			if tc.pos > 0 {
				h.advance(0, prompt[:tc.pos])
			}
			if got := h.m.ChunkEnd(0, tc.end); got != tc.want {
				t.Fatalf("ChunkEnd(0, %d) at %d = %d, want %d", tc.end, tc.pos, got, tc.want)
			}
		})
	}
}
