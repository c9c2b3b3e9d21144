package openai_test

import (
	"encoding/json"
	"strings"
	"testing"

	"ubatch/server/servertest"
)

// env is servertest's server over stories260K (from ../shared), which serves this dialect;
// its complete is servertest's Complete.
type env struct{ *servertest.Env }

func (e *env) complete(body map[string]any) servertest.Completion { return e.Complete(body) }

func newEnv(t *testing.T) *env { return &env{servertest.New(t, servertest.Options{})} }

// streamCompletion runs a streaming /v1/completions request and returns the text, the last
// finish reason and every event's data.
func (e *env) streamCompletion(body map[string]any) (string, string, []string) {
	e.T.Helper()
	resp := e.PostStream("/v1/completions", body)
	defer resp.Body.Close()
	events := servertest.SSEEvents(e.T, resp.Body)
	var text strings.Builder
	finish := ""
	for _, ev := range events {
		if ev == "[DONE]" {
			continue
		}
		var ch servertest.Completion
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			e.T.Fatalf("bad chunk %q: %v", ev, err)
		}
		for _, x := range ch.Choices {
			text.WriteString(x.Text)
			if x.FinishReason != "" {
				finish = x.FinishReason
			}
		}
	}
	return text.String(), finish, events
}

// kvUsed is the engine's KV cells in use.
func (e *env) kvUsed() int { return e.Engine.Stats().KV.Used }
