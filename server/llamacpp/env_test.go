package llamacpp

import (
	"testing"

	"ubatch/server"
	"ubatch/server/servertest"
)

// newEnv is a server with llama.cpp's routes over o (stories260K unless o.Model says).
func newEnv(t testing.TB, o servertest.Options) *servertest.Env {
	t.Helper()
	return servertest.New(t, o, Routes)
}

// Sizes of synthEnv's engine: a batch smaller than the context, so that /infill's extra
// context has room (llama-server gives it n_ctx - n_batch - 2·n_predict tokens).
const (
	synthNCtx   = 1024
	synthNBatch = 256
)

// synthEnv is newEnv over a mini synth qwen3 model written to t.TempDir() (no ../shared
// needed), whose vocabulary has FIM tokens when fim is set.
func synthEnv(t *testing.T, fim bool) *servertest.Env {
	t.Helper()
	return newEnv(t, servertest.Options{Model: servertest.SynthModel(t, "qwen3", fim, false),
		NCtx: synthNCtx, NBatch: synthNBatch, NSeq: 4, Config: server.Config{ModelID: "synth"}})
}

func strp(s string) *string { return &s }
