package server

import (
	"net/http"
	"testing"
	"time"

	"ubatch/engine"
	"ubatch/internal/testmodel"
	"ubatch/quant"
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
	m := testmodel.Open(t, taskModel(t, o.arch, o.fim, o.rerank))
	lctx := testmodel.Runtime(t, m, runner.Options{NCtx: synthNCtx, NBatch: synthNBatch, NUBatch: synthNBatch, NSeqMax: 4, KVType: quant.F32, Threads: 2})
	eng := testmodel.Engine(t, m, lctx, engine.Config{})
	stop := testmodel.Run(t, eng)
	var rr *Reranker
	if o.serveRerank {
		var err error
		if rr, err = NewReranker(m, 512); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := New(Config{Model: m, Engine: eng, Dialects: testDialects, ModelID: "synth", Reranker: rr,
		MaxEmbeddingInputs: o.cfg.MaxEmbeddingInputs, MaxEmbeddingTokens: o.cfg.MaxEmbeddingTokens})
	if err != nil {
		t.Fatal(err)
	}
	return serveEnv(t, m, eng, srv, stop, &http.Client{Timeout: 60 * time.Second})
}

// taskModel writes synth.TaskFixture(arch, "q8_0", fim, rerank) to t.TempDir() and returns its
// path.
func taskModel(t *testing.T, arch string, fim, rerank bool) string {
	t.Helper()
	w, err := synth.TaskFixture(arch, "q8_0", fim, rerank)
	if err != nil {
		t.Fatal(err)
	}
	return testmodel.Write(t, w, arch+".gguf")
}
