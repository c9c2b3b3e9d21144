package openai_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"ubatch/server"
	"ubatch/server/servertest"
)

// env is servertest's server over stories260K (from ../shared), which serves this dialect.
type env struct{ *servertest.Env }

func newEnv(t *testing.T) *env { return &env{servertest.New(t, servertest.Options{})} }

// completionResult decodes a /v1/completions response or stream chunk.
type completionResult struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Text         string `json:"text"`
		Index        int    `json:"index"`
		FinishReason string `json:"finish_reason"`
		Logprobs     *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []float64            `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage server.UsageJSON `json:"usage"`
}

// complete runs a non-streaming /v1/completions request.
func (e *env) complete(body map[string]any) completionResult {
	e.T.Helper()
	var res completionResult
	e.PostJSON("/v1/completions", body, http.StatusOK, &res)
	return res
}

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
		var ch completionResult
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
