// Package servertest runs a real server for the tests of the API dialects (server/llamacpp, ...):
// a model, an engine and a server.Server with OpenAI's dialect and the dialects asked for,
// behind an httptest server, closed when the test ends. The core's own tests have their fixtures
// in package server; both post through internal/testhttp's Caller.
package servertest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"ubatch/engine"
	"ubatch/internal/testdata"
	"ubatch/internal/testhttp"
	"ubatch/internal/testmodel"
	"ubatch/model"
	_ "ubatch/model/all" // the families the test models are
	"ubatch/quant"
	"ubatch/runner"
	"ubatch/server"
	"ubatch/server/openai"
	"ubatch/synth"
)

// Options size a test server; zero fields take small defaults.
type Options struct {
	// Model is the model file; "" is ../shared's stories260K.gguf.
	Model string
	// NCtx, NBatch and NSeq size the runtime (512, 512 and 8 when 0).
	NCtx, NBatch, NSeq int
	// Engine configures the engine.
	Engine engine.Config
	// Config is the server's; Model, Engine and ModelID ("stories" when "") are filled in.
	Config server.Config
}

// Env is a real engine and server behind an httptest server; its Caller posts to it.
type Env struct {
	testhttp.Caller
	Model  *model.Model
	Engine *engine.Engine
	Server *server.Server
}

// New starts the server of o, serving dialects besides o.Config.Dialects (and OpenAI's: Serve).
func New(t testing.TB, o Options, dialects ...server.Dialect) *Env {
	t.Helper()
	o.Config.Dialects = append(o.Config.Dialects, dialects...)
	if o.Model == "" {
		o.Model = testdata.Model(t, "stories260K.gguf")
	}
	o.NCtx, o.NBatch, o.NSeq = orDefault(o.NCtx, 512), orDefault(o.NBatch, 512), orDefault(o.NSeq, 8)
	m := testmodel.Open(t, o.Model)
	lctx := testmodel.Runtime(t, m, runner.Options{NCtx: o.NCtx, NBatch: o.NBatch, NUBatch: o.NBatch, NSeqMax: o.NSeq, KVType: quant.F32, Threads: 2})
	eng := testmodel.Engine(t, m, lctx, o.Engine)
	testmodel.Run(t, eng)
	if o.Config.ModelID == "" {
		o.Config.ModelID = "stories"
	}
	return Serve(t, m, eng, o.Config)
}

// Serve serves a server over m and eng (running) with cfg, its Model and Engine filled in, and
// OpenAI's dialect besides cfg's, as cmd/ubatch serves it: the dialects' tests compare their
// answers with OpenAI's.
func Serve(t testing.TB, m *model.Model, eng *engine.Engine, cfg server.Config) *Env {
	t.Helper()
	cfg.Model, cfg.Engine = m, eng
	cfg.Dialects = append(cfg.Dialects[:len(cfg.Dialects):len(cfg.Dialects)], openai.Routes)
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	e := &Env{Caller: testhttp.Caller{T: t, URL: ts.URL, Client: &http.Client{Timeout: 60 * time.Second}}, Model: m, Engine: eng, Server: srv}
	t.Cleanup(func() { e.Client.CloseIdleConnections(); ts.Close() })
	return e
}

// SynthModel writes synth.TaskFixture(arch, "q8_0", fim, rerank) to t.TempDir() and returns
// its path: a model that needs no ../shared.
func SynthModel(t testing.TB, arch string, fim, rerank bool) string {
	t.Helper()
	w, err := synth.TaskFixture(arch, "q8_0", fim, rerank)
	if err != nil {
		t.Fatal(err)
	}
	return testmodel.Write(t, w, arch+".gguf")
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// Completion is what the dialects' tests read of a /v1/completions answer or stream chunk.
type Completion = testhttp.Completion

// ErrorBody and ErrorDetail are OpenAI's error shape as the dialects' tests decode it.
type (
	ErrorBody   = testhttp.ErrorBody
	ErrorDetail = testhttp.ErrorDetail
)

// SSEEvents reads a whole event stream and returns the data payloads.
var SSEEvents = testhttp.SSEEvents

// ReferenceGreedy returns llama.cpp's greedy continuation of "Once upon a time" for
// stories260K.
func ReferenceGreedy(t testing.TB) (prompt, text string) {
	t.Helper()
	r := testdata.ReadReference(t, "stories260K")
	return r.Prompt, r.GreedyText
}
