package kvdisk

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"ubatch/engine"
	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	"ubatch/model"
	_ "ubatch/model/all"
	"ubatch/runner"
	"ubatch/sample"
)

// serveOnce runs an engine over m with the disk tier in dir, generates maxTokens greedy tokens
// after prompt, stops the engine (which writes the prefix cache out) and closes the tier. It
// returns the tokens, the request's usage and the prompt tokens the engine computed.
func serveOnce(t *testing.T, m *model.Model, dir string, prompt []int32, maxTokens int) ([]int32, engine.Usage, uint64) {
	t.Helper()
	r := serve(t, m, dir, 2048, [][]int32{prompt}, maxTokens)
	return r[0].toks, r[0].usage, r[0].computed
}

type served struct {
	toks     []int32
	usage    engine.Usage
	computed uint64 // the engine's prompt tokens computed for this request
}

// serve runs an engine of nCtx cells over m with the disk tier in dir, runs prompts one after
// the other (maxTokens greedy tokens each), stops the engine (which writes the prefix cache
// out) and closes the tier.
func serve(t *testing.T, m *model.Model, dir string, nCtx int, prompts [][]int32, maxTokens int) []served {
	t.Helper()
	lctx := testmodel.Runtime(t, m, runner.Options{NCtx: nCtx, NSeqMax: 1, Threads: 2})
	l := testmodel.Layout(t, m, lctx)
	tier, err := Open(dir, l, 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	eng := testmodel.Engine(t, m, lctx, engine.Config{IsEOG: func(int32) bool { return false }})
	if !eng.SetTiers([]engine.BlockSource{tier}, tier, l) {
		t.Fatal("SetTiers refused")
	}
	stop := testmodel.Run(t, eng)
	defer stop() // the engine stops, writing its prefix cache out, before the tier closes
	ctx := context.Background()
	greedy := sample.DefaultParams()
	greedy.Temperature = 0
	var out []served
	for _, prompt := range prompts {
		before := eng.Stats().PromptComputed
		st, err := eng.Submit(ctx, engine.Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: greedy})
		if err != nil {
			t.Fatal(err)
		}
		var r served
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		for {
			o, err := st.Recv(rctx)
			if err != nil {
				t.Fatal(err)
			}
			if o.Done {
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				r.usage = o.Usage
				break
			}
			r.toks = append(r.toks, o.Token)
		}
		cancel()
		// Wait until the engine has published the finished step's counters.
		for eng.Stats().Running != 0 {
			time.Sleep(time.Millisecond)
		}
		r.computed = eng.Stats().PromptComputed - before
		out = append(out, r)
		tier.Flush() // the evicted blocks are on disk before the next prompt looks
	}
	return out
}

// TestRestartServesFromDisk is the disk tier end to end on a real model: a 900-token prompt,
// then, after the engine and its tier stopped and new ones started on the same directory, the
// same prompt again: the same greedy tokens, with its full blocks counted as cached (read back
// from disk) and only the rest computed.
func TestRestartServesFromDisk(t *testing.T) {
	m := testmodel.Open(t, testdata.Model(t, "synth-tiny-f16.gguf"))
	rng := rand.New(rand.NewPCG(9, 9))
	prompt := randTokens(rng, 900, 3, m.Hparams().Vocab)
	dir := t.TempDir()
	cold, u1, computed1 := serveOnce(t, m, dir, prompt, 8)
	if u1.CachedTokens != 0 || computed1 != 900 {
		t.Fatalf("cold run: %d cached, %d computed; want 0 and 900", u1.CachedTokens, computed1)
	}
	warm, u2, computed2 := serveOnce(t, m, dir, prompt, 8)
	if !slices.Equal(cold, warm) {
		t.Fatalf("after the restart the greedy tokens differ:\n cold %v\n warm %v", cold, warm)
	}
	// 900 tokens: 56 full blocks of 16 (896) whose last holds prompt tokens only up to 895;
	// the block holding 896..899 ended in generated tokens, so it does not match.
	if u2.CachedTokens < 896 || computed2 != uint64(900-u2.CachedTokens) {
		t.Fatalf("after the restart: %d cached, %d computed; want at least 896 cached from disk and the rest computed",
			u2.CachedTokens, computed2)
	}
	t.Logf("cold: %d computed; from disk: %d cached, %d computed", computed1, u2.CachedTokens, computed2)
}

// TestEvictedServedFromDisk runs a 900-token prompt, then another that needs the memory (the
// first one's blocks are evicted: the store reads them out into the disk tier), then the first
// again: its blocks come back from disk into the real store, with the same greedy tokens.
func TestEvictedServedFromDisk(t *testing.T) {
	m := testmodel.Open(t, testdata.Model(t, "synth-tiny-f16.gguf"))
	rng := rand.New(rand.NewPCG(10, 10))
	a, b := randTokens(rng, 900, 3, m.Hparams().Vocab), randTokens(rng, 900, 3, m.Hparams().Vocab)
	r := serve(t, m, t.TempDir(), 1024, [][]int32{a, b, a}, 8)
	if !slices.Equal(r[0].toks, r[2].toks) {
		t.Fatalf("the prompt served from disk gave other tokens:\n first %v\n again %v", r[0].toks, r[2].toks)
	}
	if r[0].usage.CachedTokens != 0 || r[1].usage.CachedTokens != 0 {
		t.Fatalf("cached %d and %d tokens of fresh prompts", r[0].usage.CachedTokens, r[1].usage.CachedTokens)
	}
	if r[2].usage.CachedTokens < 896 || r[2].computed != uint64(900-r[2].usage.CachedTokens) {
		t.Fatalf("again: %d cached, %d computed; want at least 896 cached from disk", r[2].usage.CachedTokens, r[2].computed)
	}
}
