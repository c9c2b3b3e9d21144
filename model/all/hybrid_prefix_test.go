package all_test

import (
	"context"
	"slices"
	"testing"

	"ubatch/engine"
	"ubatch/model"
	"ubatch/sample"
)

// hybridGreedy is temperature 0: every text below is compared token by token.
func hybridGreedy() sample.Params {
	p := sample.DefaultParams()
	p.Temperature = 0
	return p
}

// generate runs each prompt through eng at once (one stream each) and returns each one's tokens
// and usage.
func generate(t *testing.T, eng *engine.Engine, maxTokens int, prompts ...[]int32) ([][]int32, []engine.Usage) {
	t.Helper()
	var streams []*engine.Stream
	for _, p := range prompts {
		st, err := eng.Submit(context.Background(), engine.Request{Prompt: p, MaxTokens: maxTokens, Sampling: hybridGreedy()})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	outs := make([][]int32, len(prompts))
	usage := make([]engine.Usage, len(prompts))
	for i, st := range streams {
		for {
			o, err := st.Recv(context.Background())
			if err != nil {
				break
			}
			if o.Done {
				if o.Finish == engine.FinishError {
					t.Fatalf("prompt %d: %v", i, o.Err)
				}
				usage[i] = o.Usage
				continue
			}
			outs[i] = append(outs[i], o.Token)
		}
	}
	return outs, usage
}

// tokens returns n tokens of the vocabulary's middle, a walk seeded by seed.
func tokens(seed, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(20 + (seed*131+i*37+i*i*7)%480)
	}
	return out
}

// cold is prompt's greedy text from an engine that reuses no prefix of a hybrid.
func cold(t *testing.T, m *model.Model, nCtx, maxTokens int, prompt []int32) []int32 {
	t.Helper()
	eng := hybridEngine(t, m, nCtx, 1, engine.Config{StateCacheBytes: -1})
	out, u := generate(t, eng, maxTokens, prompt)
	if u[0].CachedTokens != 0 {
		t.Fatalf("an engine without snapshots reused %d tokens", u[0].CachedTokens)
	}
	return out[0]
}

// TestHybridPrefixHits: after a 70-token prompt P ran (and generated), a prompt sharing k of
// its tokens resumes from the longest block boundary at which both the attention blocks and a
// snapshot of the recurrent state exist (P's last full block, 64, and its latest boundary, 80,
// past which it generated), and computes the rest; below them it misses. Hit or miss, inside a
// block or at its edge, the greedy text equals the cold one, and the cached tokens are reported.
func TestHybridPrefixHits(t *testing.T) {
	m := load(t, hybridModel, false)
	const gen = 24
	p := append([]int32{1}, tokens(1, 69)...)
	pGen := cold(t, m, 512, gen, p)
	if len(pGen) < 16 {
		t.Fatalf("P generated %d tokens, the test needs 16", len(pGen))
	}
	cat := func(parts ...[]int32) []int32 { return slices.Concat(parts...) }
	tests := []struct {
		name   string
		probe  []int32
		cached int
	}{
		{name: "miss inside the first block", probe: cat(p[:10], tokens(2, 30)), cached: 0},
		{name: "miss at a boundary without snapshot", probe: cat(p[:32], tokens(3, 30)), cached: 0},
		{name: "miss one short of the snapshot", probe: cat(p[:63], tokens(4, 30)), cached: 0},
		{name: "hit at the boundary exactly", probe: cat(p[:64], tokens(5, 30)), cached: 64},
		{name: "hit, shared on inside the next block", probe: cat(p[:67], tokens(6, 30)), cached: 64},
		{name: "the same prompt again", probe: p, cached: 64},
		{name: "next turn inside the latest block", probe: cat(p, pGen[:5], tokens(7, 20)), cached: 64},
		{name: "next turn across the latest boundary", probe: cat(p, pGen[:14], tokens(8, 20)), cached: 80},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eng := hybridEngine(t, m, 512, 2, engine.Config{})
			if out, _ := generate(t, eng, gen, p); !slices.Equal(out[0], pGen) {
				t.Fatalf("P: %v, cold %v", out[0], pGen)
			}
			got, u := generate(t, eng, 16, tc.probe)
			if want := cold(t, m, 512, 16, tc.probe); !slices.Equal(got[0], want) {
				t.Errorf("greedy text %v, cold %v", got[0], want)
			}
			if u[0].CachedTokens != tc.cached {
				t.Errorf("%d cached tokens, want %d", u[0].CachedTokens, tc.cached)
			}
		})
	}
}

// TestHybridSharedPrefixWorkload is the first workload: a 2,000-token shared prefix,
// then 16 different questions at once. The first computes the prefix; the other 15 reuse it from
// a snapshot (at 1,536, the latest of every 32 blocks, or at 2,000, where the first of them
// branched), with the same greedy text as cold, and report the cached tokens.
func TestHybridSharedPrefixWorkload(t *testing.T) {
	m := load(t, hybridModel, false)
	prefix := append([]int32{1}, tokens(11, 1999)...)
	var qs [][]int32
	for i := range 16 {
		qs = append(qs, slices.Concat(prefix, tokens(100+i, 12+i%5)))
	}
	eng := hybridEngine(t, m, 16384, 4, engine.Config{})
	first, u0 := generate(t, eng, 8, qs[0])
	if u0[0].CachedTokens != 0 {
		t.Fatalf("the first question found %d cached tokens", u0[0].CachedTokens)
	}
	outs, usage := generate(t, eng, 8, qs[1:]...)
	outs, usage = append(first, outs...), append(u0, usage...)
	for i, u := range usage[1:] {
		if u.CachedTokens < 1536 {
			t.Errorf("question %d: %d cached tokens, want at least 1536 of the 2000-token prefix", i+1, u.CachedTokens)
		}
	}
	for _, i := range []int{0, 1, 7, 15} { // cold runs of a few: each costs a 2,000-token prefill
		if want := cold(t, m, 4096, 8, qs[i]); !slices.Equal(outs[i], want) {
			t.Errorf("question %d: %v, cold %v", i, outs[i], want)
		}
	}
	cached := make([]int, len(usage))
	for i, u := range usage {
		cached[i] = u.CachedTokens
	}
	t.Logf("cached tokens per question: %v; snapshots %+v", cached, eng.Stats().States)
}

// TestHybridChatWorkload is the second workload: a 6-turn chat, each turn's prompt the
// history so far (prompt and reply) and a new message. Each follow-up resumes from the snapshot
// the previous turn left at its latest block boundary: at least 80% of its prompt is cached, and
// its reply equals the cold one.
func TestHybridChatWorkload(t *testing.T) {
	m := load(t, hybridModel, false)
	eng := hybridEngine(t, m, 4096, 2, engine.Config{})
	hist := append([]int32{1}, tokens(21, 299)...)
	for turn := range 6 {
		prompt := slices.Concat(hist, tokens(200+turn, 12))
		out, u := generate(t, eng, 32, prompt)
		if want := cold(t, m, 4096, 32, prompt); !slices.Equal(out[0], want) {
			t.Errorf("turn %d: %v, cold %v", turn, out[0], want)
		}
		if share := float64(u[0].CachedTokens) / float64(len(prompt)); turn > 0 && share < 0.8 {
			t.Errorf("turn %d: %d of %d prompt tokens cached (%.0f%%), want at least 80%%", turn, u[0].CachedTokens, len(prompt), 100*share)
		}
		t.Logf("turn %d: %d of %d prompt tokens cached", turn, u[0].CachedTokens, len(prompt))
		hist = slices.Concat(prompt, out[0])
	}
}
