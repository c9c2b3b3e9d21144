package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a log sink for a handler written to by several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestAnyNameOneModel: a server of one model with AnyName (serve -m once) answers any model
// name on every route, as llama-server does, reporting its own id; the unknown name is logged
// once however often it is sent; deletes and pulls stay strict.
func TestAnyNameOneModel(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	e := newMultiEnv(t, multiOptions{cfg: RegistryConfig{KeepAlive: -1, AnyName: true, Logger: logger}, embedder: true, one: true})
	tests := []struct {
		name, method, path, body string
		want                     int
		contains                 string
	}{
		{name: "openai chat, the official client's default", method: "POST", path: "/v1/chat/completions", body: chatBody("gpt-4o-mini", ""), want: 200, contains: `"model":"alpha"`},
		{name: "openai chat again", method: "POST", path: "/v1/chat/completions", body: chatBody("gpt-4o-mini", ""), want: 200, contains: `"object":"chat.completion"`},
		{name: "openai completions", method: "POST", path: "/v1/completions", body: `{"model":"gpt-3.5-turbo-instruct","prompt":"a","max_tokens":2}`, want: 200, contains: `"model":"alpha"`},
		{name: "responses", method: "POST", path: "/v1/responses", body: `{"model":"gpt-4o","input":"hi","max_output_tokens":2}`, want: 200, contains: `"model":"alpha"`},
		{name: "openai embeddings", method: "POST", path: "/v1/embeddings", body: `{"model":"text-embedding-3-small","input":"a"}`, want: 200, contains: `"model":"alpha"`},
		{name: "ollama chat", method: "POST", path: "/api/chat", body: chatBody("llama3.2", ""), want: 200, contains: `"model":"alpha"`},
		{name: "ollama generate", method: "POST", path: "/api/generate", body: `{"model":"llama3.2:1b","prompt":"a","stream":false,"options":{"num_predict":2}}`, want: 200, contains: `"model":"alpha"`},
		{name: "ollama embed", method: "POST", path: "/api/embed", body: `{"model":"nomic-embed-text","input":"a"}`, want: 200, contains: `"model":"alpha"`},
		{name: "ollama older embeddings", method: "POST", path: "/api/embeddings", body: `{"model":"nomic-embed-text","prompt":"a"}`, want: 200, contains: `"embedding"`},
		{name: "ollama show", method: "POST", path: "/api/show", body: `{"model":"llama3.2"}`, want: 200, contains: `"details"`},
		{name: "llama.cpp completion", method: "POST", path: "/completion", body: `{"model":"whatever","prompt":"a","n_predict":2}`, want: 200, contains: `"content"`},
		{name: "its own name still echoed", method: "POST", path: "/api/chat", body: chatBody("alpha:latest", ""), want: 200, contains: `"model":"alpha:latest"`},
		{name: "delete stays strict", method: "DELETE", path: "/api/delete", body: `{"model":"llama3.2"}`, want: 404, contains: `{"error":"model \"llama3.2\" not found`},
		{name: "pull stays strict", method: "POST", path: "/api/pull", body: `{"model":"llama3.2"}`, want: 404, contains: `{"error":"model \"llama3.2\" not found`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := e.do(t, tc.method, tc.path, tc.body)
			if code != tc.want || !strings.Contains(body, tc.contains) {
				t.Errorf("%s %s: %d %s, want %d with %s", tc.method, tc.path, code, body, tc.want, tc.contains)
			}
		})
	}
	out := logs.String()
	if n := strings.Count(out, `name=gpt-4o-mini`); n != 1 {
		t.Errorf("gpt-4o-mini logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, `name=llama3.2 `); n != 1 {
		t.Errorf("llama3.2 logged %d times, want once (show and chat):\n%s", n, out)
	}
}

// TestAnyNameBounds: AnyName maps names only while one model is listed (several: the strict
// 404), and remembers at most maxLoggedNames names however many a client invents.
func TestAnyNameBounds(t *testing.T) {
	tests := []struct {
		name   string
		one    bool
		want   int
		mapped bool
	}{
		{name: "one model maps", one: true, want: 200, mapped: true},
		{name: "several stay strict", one: false, want: 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newMultiEnv(t, multiOptions{cfg: RegistryConfig{KeepAlive: -1, AnyName: true, Logger: slog.New(slog.DiscardHandler)}, one: tc.one})
			code, _, body := e.do(t, "POST", "/v1/chat/completions", chatBody("gpt-4o-mini", ""))
			if code != tc.want || (code == 404) != strings.Contains(body, `"code":"model_not_found"`) {
				t.Fatalf("%d %s, want %d", code, body, tc.want)
			}
			for i := range maxLoggedNames + 10 {
				_, mapped, err := e.reg.resolve(strings.Repeat("x", i+1), true)
				if mapped != tc.mapped || (err == nil) != tc.mapped {
					t.Fatalf("name %d: mapped %v err %v, want mapped %v", i, mapped, err, tc.mapped)
				}
			}
			e.reg.mu.Lock()
			n := len(e.reg.named)
			e.reg.mu.Unlock()
			if n > maxLoggedNames {
				t.Errorf("%d names remembered, want at most %d", n, maxLoggedNames)
			}
			if _, err := e.reg.Find("gpt-4o-mini"); err == nil {
				t.Errorf("Find maps an unknown name: it must stay strict")
			}
		})
	}
}

// TestOpenAINodeClientAnyName: the official OpenAI Node client with an app's hard-coded
// "gpt-4o-mini" (and "text-embedding-3-small" with dimensions 8) gets a completion and a
// shortened unit embedding from a one-model server, reported under the model's id.
func TestOpenAINodeClientAnyName(t *testing.T) {
	dir := nodeOpenAI(t)
	e := newMultiEnv(t, multiOptions{cfg: RegistryConfig{KeepAlive: -1, AnyName: true, Logger: slog.New(slog.DiscardHandler)}, embedder: true, one: true})
	out := runNodeScript(t, dir, "openai_anyname.js", "BASE_URL="+e.ts.URL+"/v1")
	var got struct {
		ChatModel  string    `json:"chat_model"`
		ChatText   *string   `json:"chat_text"`
		ChatFinish string    `json:"chat_finish"`
		EmbedModel string    `json:"embed_model"`
		Embedding  []float64 `json:"embedding"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	if got.ChatModel != "alpha" || got.ChatText == nil || got.ChatFinish == "" {
		t.Errorf("chat: model %q, text %v, finish %q; want a completion from alpha", got.ChatModel, got.ChatText, got.ChatFinish)
	}
	var norm float64
	for _, x := range got.Embedding {
		norm += x * x
	}
	if got.EmbedModel != "alpha" || len(got.Embedding) != 8 || math.Abs(norm-1) > 1e-4 {
		t.Errorf("embeddings: model %q, %d dimensions, norm² %.6f; want alpha's, 8, unit", got.EmbedModel, len(got.Embedding), norm)
	}
}
