package main

import (
	"strings"
	"testing"

	"ubatch/internal/testdata"
)

// TestServeOneModelHabits: serve -m once (no --embeddings) answers an app's hard-coded OpenAI
// model name with its one model, as llama-server does, and embeds on Ollama's routes, as Ollama
// does with any model; /v1/embeddings stays behind --embeddings, as llama-server's.
func TestServeOneModelHabits(t *testing.T) {
	p := startServeProc(t, nil, "-m", testdata.Model(t, "stories260K.gguf"), "-np", "2", "-c", "512", "-t", "2")
	tests := []struct {
		name, path, body string
		code             int
		want             string
	}{
		{name: "openai chat with gpt-4o-mini", path: "/v1/chat/completions",
			body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`, code: 200, want: `"model":"stories260K.gguf"`},
		{name: "ollama embed without --embeddings", path: "/api/embed", body: `{"model":"nomic-embed-text","input":["a","b"]}`, code: 200, want: `"embeddings":[[`},
		{name: "ollama older embeddings", path: "/api/embeddings", body: `{"model":"stories260K","prompt":"a"}`, code: 200, want: `"embedding":[`},
		{name: "v1 embeddings stays behind the flag", path: "/v1/embeddings", body: `{"model":"stories260K","input":"a"}`, code: 404, want: "--embeddings"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := p.call(t, tc.path, tc.body); code != tc.code || !strings.Contains(body, tc.want) {
				t.Errorf("%s: %d %.300s, want %d with %s", tc.path, code, body, tc.code, tc.want)
			}
		})
	}
}
