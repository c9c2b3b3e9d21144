package server

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"ubatch/engine"
)

// nodeOpenAI installs the official OpenAI Node client the chat test was written for (npm
// "openai", major version 4) and returns the folder holding node_modules (nodeOpenAIVersion).
func nodeOpenAI(t *testing.T) string { return nodeOpenAIVersion(t, "4") }

// TestOpenAINodeClient: the official OpenAI Node client retrieves the model, gets tool_calls for
// a chat with tools, gets JSON that follows a json_schema response_format, streams with usage and
// makes embeddings, against a real server on stories260K.
func TestOpenAINodeClient(t *testing.T) {
	dir := nodeOpenAI(t)
	// The ChatML fallback shows the tools in the prompt: the tool-call request needs more than
	// the default 512 tokens of context.
	e := newEnv(t, envOptions{embedder: engine.PoolMean, nCtx: 2048})
	ts := httptest.NewServer(e.srv.Handler())
	defer ts.Close()
	out := runNodeScript(t, dir, "openai_client.js", "BASE_URL="+ts.URL+"/v1")
	var got struct {
		Model     string `json:"model"`
		ToolCalls []struct {
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
		ToolFinish  string         `json:"tool_finish"`
		Structured  string         `json:"structured"`
		StreamText  string         `json:"stream_text"`
		StreamUsage map[string]any `json:"stream_usage"`
		EmbedLen    int            `json:"embedding_len"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	if got.Model != "stories" {
		t.Errorf("models.retrieve: %q", got.Model)
	}
	var args map[string]any
	if len(got.ToolCalls) != 1 || got.ToolCalls[0].Function.Name != "get_weather" || got.ToolFinish != "tool_calls" ||
		json.Unmarshal([]byte(got.ToolCalls[0].Function.Arguments), &args) != nil || args["city"] == nil {
		t.Errorf("tool call: %+v, finish %q", got.ToolCalls, got.ToolFinish)
	}
	var person struct {
		Name *string `json:"name"`
		Age  *int    `json:"age"`
	}
	if err := json.Unmarshal([]byte(got.Structured), &person); err != nil || person.Name == nil || person.Age == nil {
		t.Errorf("json_schema reply %q does not follow the schema: %v", got.Structured, err)
	}
	if got.StreamText == "" || got.StreamUsage["completion_tokens"] == nil {
		t.Errorf("stream: text %q, usage %v", got.StreamText, got.StreamUsage)
	}
	if got.EmbedLen != e.model.Hparams().Dim {
		t.Errorf("embedding of %d values, want %d", got.EmbedLen, e.model.Hparams().Dim)
	}
	t.Logf("client output: %s", out)
}
