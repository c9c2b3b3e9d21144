package ollama

import (
	"testing"

	"ubatch/server/servertest"
)

// newEnv is a server with Ollama's routes over o (stories260K unless o.Model says).
func newEnv(t testing.TB, o servertest.Options) *servertest.Env {
	t.Helper()
	return servertest.New(t, o, Routes)
}
