package engine_test

import (
	"context"
	"testing"
	"time"

	"ubatch/engine"
	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	_ "ubatch/model/all"
	"ubatch/quant"
	"ubatch/runner"
	"ubatch/sample"
)

// TestHogBesideAPlainClient runs stories260K on one thread with 64 slots: one client's request
// of n = 64 that ignores the end of generation takes every slot and would generate to the
// sequence cap (~40 s of steps); another client's request then gets its first token within a
// second (it waited the hog's whole run before fair share), and the hog still finishes.
func TestHogBesideAPlainClient(t *testing.T) {
	m := testmodel.Open(t, testdata.Model(t, "stories260K.gguf"))
	rt := testmodel.Runtime(t, m, runner.Options{NCtx: 8192, NBatch: 512, NUBatch: 512, NSeqMax: 64, KVType: quant.F16, Threads: 1})
	e := testmodel.Engine(t, m, rt, engine.Config{MaxRunning: 64})
	testmodel.Run(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	hogParams := sample.Params{Temperature: 1, TopP: 1, RepeatPenalty: 1, Seed: 1, IgnoreTokens: m.Vocab.EOG()}
	reqs := make([]engine.Request, 64)
	for i := range reqs {
		reqs[i] = engine.Request{Prompt: m.Vocab.Encode("Once", true, false), Sampling: hogParams, Client: "hog"}
		reqs[i].Sampling.Seed += uint64(i)
	}
	hog, err := e.Submit(ctx, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the hog decodes on every slot it can hold.
	seen := map[int]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < 64 && time.Now().Before(deadline) {
		o, err := hog.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen[o.Seq] = true
	}
	for deadline := time.Now().Add(5 * time.Second); e.Stats().Running < 64 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // Stats are published after the step that pushed those tokens
	}
	running := e.Stats().Running
	if running < 16 {
		t.Fatalf("the hog runs %d sequences: not a hog", running)
	}

	plain := engine.Request{Prompt: m.Vocab.Encode("Once upon a time", true, false), MaxTokens: 8,
		Sampling: sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 1}, Client: "plain"}
	t0 := time.Now()
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second) // before fair share it waited the hog's run
	defer pcancel()
	st, err := e.Submit(pctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	o, err := st.Recv(pctx)
	if err != nil || o.Done {
		t.Fatalf("the plain client's first output: %+v, %v", o, err)
	}
	ttft := time.Since(t0)
	for !o.Done {
		if o, err = st.Recv(pctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("hog on %d slots; the plain client's first token after %v (queue %v), all 8 after %v", running, ttft, o.Usage.QueueTime, time.Since(t0))
	if ttft > time.Second {
		t.Errorf("the plain client's first token after %v beside the hog, want within 1 s", ttft)
	}
	if o.Finish != engine.FinishLength || o.Usage.CompletionTokens != 8 {
		t.Errorf("the plain client's request ended %s after %d tokens, want length after 8", o.Finish, o.Usage.CompletionTokens)
	}
	cancel() // the hog has made its point; its sequences are dropped at the next step
}
