package recstate

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"ubatch/kvcache"
)

// simulator serves requests one after another as the engine would with an ample KV cache: the
// attention match is every full block any earlier request computed, the state's hit is Match's,
// prompts are prefilled in chunks of at most simChunk tokens cut by ChunkEnd, and the reply is
// decoded a token per step.
type simulator struct {
	h          *harness
	seen       map[kvcache.Key]bool
	peak       int   // most snapshots held at once
	steps      int   // prefill steps
	plainSteps int   // prefill steps without ChunkEnd's cuts
	cached     []int // per request, its cached (hit) tokens
	lens       []int // per request, its prompt length
}

const simChunk = 512

func (s *simulator) serve(prompt, reply []int32) {
	h, bs := s.h, int(s.h.m.bs)
	keys := kvcache.ChainKeys(nil, prompt, bs)
	c := 0
	for c < len(keys) && s.seen[keys[c]] {
		c++
	}
	hit := h.start(0, kvcache.Salt{}, prompt, min(c*bs, len(prompt)-1))
	s.steps += h.prefill(0, prompt, len(prompt), simChunk)
	s.plainSteps += (len(prompt) - hit + simChunk - 1) / simChunk
	hist := append(slices.Clone(prompt), reply...)
	for i := len(prompt); i < len(hist); i++ {
		h.advance(0, hist[i:i+1])
	}
	h.checkState(0, hist)
	for _, k := range kvcache.ChainKeys(nil, hist, bs) {
		s.seen[k] = true
	}
	h.m.Free(0)
	s.peak = max(s.peak, h.m.Stats().Snapshots)
	s.cached, s.lens = append(s.cached, hit), append(s.lens, len(prompt))
}

// sharedPrefix is the first workload: a 2,000-token system prompt, then 16 different
// questions of 20 to 80 tokens, each answered with 64 tokens. It returns how many of the 15
// follow-ups reuse the prefix (compute at most 30% of their prompt, the TTFT bound of
// 0.3x the cold one if time follows computed tokens) and their mean cached ratio.
func sharedPrefix(s *simulator) (reused int, ratio float64) {
	sys := tokens(100, 2000)
	for q := range 16 {
		s.serve(append(slices.Clone(sys), tokens(200+q, 20+q*4)...), tokens(300+q, 64))
	}
	for i := 1; i < 16; i++ {
		if 10*(s.lens[i]-s.cached[i]) <= 3*s.lens[i] {
			reused++
		}
		ratio += float64(s.cached[i]) / float64(s.lens[i]) / 15
	}
	return reused, ratio
}

// chat is the second: a 300-token system prompt and 6 turns, each a user message of 30 to 105
// tokens with 4 template tokens around it and a reply of 80 to 205 tokens; each turn's prompt
// is the whole conversation so far. It returns the least and the mean cached ratio of the 5
// follow-ups.
func chat(s *simulator) (least, mean float64) {
	hist := tokens(400, 300)
	for turn := range 6 {
		prompt := append(append(slices.Clone(hist), 1, 2), tokens(500+turn, 30+turn*15)...)
		prompt = append(prompt, 3, 4)
		reply := tokens(600+turn, 80+turn*25)
		s.serve(prompt, reply)
		hist = append(prompt, reply...)
	}
	least = 1
	for i := 1; i < 6; i++ {
		r := float64(s.cached[i]) / float64(s.lens[i])
		least, mean = min(least, r), mean+r/5
	}
	return least, mean
}

// TestPolicySimulation measures each policy on both workloads with an unbounded budget (and the
// default under small ones, LRU evicting): cached
// ratios, the most snapshots held at once (each StateBytes), and the prefill steps ChunkEnd's
// cuts add. It fails unless DefaultPolicy meets the targets (15 of 16 reuse the shared
// prefix; every chat follow-up at least 80% cached) and no snapshots at all meets neither.
func TestPolicySimulation(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-28s %7s %7s %6s %6s | %7s %7s %6s %6s\n", "policy", "reused", "ratio", "snaps", "steps", "least", "mean", "snaps", "steps")
	for _, tc := range []struct {
		name   string
		policy Policy
		slots  int64 // the budget in snapshots, 0 for unbounded
	}{
		{name: "none", policy: Policy{}},
		{name: "every 1", policy: Policy{Every: 1}},
		{name: "every 8", policy: Policy{Every: 8}},
		{name: "every 32", policy: Policy{Every: 32}},
		{name: "every 32 + tail", policy: Policy{Every: 32, Tail: true}},
		{name: "every 32 + branch", policy: Policy{Every: 32, Branch: true}},
		{name: "prompt end + tail", policy: Policy{PromptEnd: true, Tail: true}},
		{name: "branch + prompt end + tail", policy: Policy{Branch: true, PromptEnd: true, Tail: true}},
		{name: "every 128 + the rest", policy: Policy{Every: 128, Branch: true, PromptEnd: true, Tail: true}},
		{name: "default (every 32 + rest)", policy: DefaultPolicy},
		{name: "default, 8 slots", policy: DefaultPolicy, slots: 8},
		{name: "default, 4 slots", policy: DefaultPolicy, slots: 4},
		{name: "default, 2 slots", policy: DefaultPolicy, slots: 2},
	} {
		cfg := Config{MaxSeqs: 1, StateBytes: 1, Budget: 1 << 20, Policy: tc.policy}
		if tc.slots > 0 {
			cfg.Budget = tc.slots
		}
		a := &simulator{h: newHarness(t, cfg), seen: map[kvcache.Key]bool{}}
		reused, ratio := sharedPrefix(a)
		c := &simulator{h: newHarness(t, cfg), seen: map[kvcache.Key]bool{}}
		least, mean := chat(c)
		fmt.Fprintf(&b, "%-28s %4d/15 %7.3f %6d %6s | %7.3f %7.3f %6d %6s\n", tc.name, reused, ratio, a.peak,
			fmt.Sprintf("+%d", a.steps-a.plainSteps), least, mean, c.peak, fmt.Sprintf("+%d", c.steps-c.plainSteps))
		meets := reused >= 15 && least >= 0.8
		if tc.name == "none" && (reused > 0 || least > 0) {
			t.Errorf("no snapshots but cached tokens: reused %d, least %.3f", reused, least)
		}
		if tc.policy == DefaultPolicy && tc.slots == 0 && !meets {
			t.Errorf("the default policy misses the targets: reused %d/15, least chat ratio %.3f", reused, least)
		}
	}
	t.Log("shared prefix (reused, mean ratio, peak snapshots, extra prefill steps) | 6-turn chat (least and mean ratio, peak snapshots, extra steps)" + b.String())
}
