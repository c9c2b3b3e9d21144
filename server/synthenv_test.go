package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"ubatch/engine"
	"ubatch/kvcache"
	"ubatch/model"
	"ubatch/runner"
	"ubatch/synth"
)

// Sizes of synthEnv's engine: a batch smaller than the context, so that /infill's extra
// context has room (llama-server gives it n_ctx - n_batch - 2·n_predict tokens).
const (
	synthNCtx   = 1024
	synthNBatch = 256
)

// synthOptions choose synthEnv's model and server.
type synthOptions struct {
	arch        string // a synth family; "" is qwen3
	fim, rerank bool   // the model's vocabulary has FIM tokens; the model is a reranker
	serveRerank bool   // Config.Reranker is set (serve --rerank)
	cfg         Config // MaxEmbeddingInputs and MaxEmbeddingTokens are copied
}

// synthEnv is newEnv over a mini synth model written to t.TempDir(): no ../shared needed.
func synthEnv(t *testing.T, o synthOptions) *testEnv {
	t.Helper()
	if o.arch == "" {
		o.arch = "qwen3"
	}
	w, err := synth.TaskFixture(o.arch, "q8_0", o.fim, o.rerank)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), o.arch+".gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	m, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	lctx, err := runner.New(m.Graph, runner.Options{NCtx: synthNCtx, NBatch: synthNBatch, NUBatch: synthNBatch, NSeqMax: 4, KVType: kvcache.F32, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lctx.Close)
	opts := lctx.Options()
	eng, err := engine.New(lctx, engine.Limits{NCtx: opts.NCtx, NSeqMax: opts.NSeqMax, NBatch: opts.NBatch, Vocab: m.Hparams().Vocab},
		engine.Config{IsEOG: m.Vocab.IsEOG})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go eng.Run(ctx)
	t.Cleanup(func() { cancel(); <-eng.Done() })
	var rr *Reranker
	if o.serveRerank {
		if rr, err = NewReranker(m, 512); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := New(Config{Model: m, Engine: eng, ModelID: "synth", Reranker: rr,
		MaxEmbeddingInputs: o.cfg.MaxEmbeddingInputs, MaxEmbeddingTokens: o.cfg.MaxEmbeddingTokens})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	e := &testEnv{t: t, model: m, eng: eng, srv: srv, ts: ts, client: &http.Client{Timeout: 60 * time.Second}, stopEngine: cancel}
	t.Cleanup(func() { e.client.CloseIdleConnections(); ts.Close() })
	return e
}
