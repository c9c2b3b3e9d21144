package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"ubatch/internal/testhttp"
)

// saltPrompt is a stories260K prompt of three full blocks and a partial one.
const saltPrompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big tree with red apples."

// TestCacheSaltSeparatesTenants sends one prompt under two salts and none, on the completion and
// chat routes: the first request of each salt finds nothing of the others' (0 cached tokens,
// though the same tokens are in the cache), the second of each finds its own.
func TestCacheSaltSeparatesTenants(t *testing.T) {
	e := newEnv(t, envOptions{})
	n := len(e.model.Vocab.Encode(saltPrompt, true, false))
	chat := []map[string]string{{"role": "user", "content": saltPrompt}}
	tests := []struct {
		name   string
		path   string
		salt   any // nil: absent
		cached func(c, prompt int) bool
	}{
		{name: "salt a, first", path: "/v1/completions", salt: "a", cached: zero},
		{name: "salt b, first", path: "/v1/completions", salt: "b", cached: zero},
		{name: "no salt, first", path: "/v1/completions", cached: zero},
		{name: "salt a, again", path: "/v1/completions", salt: "a", cached: func(c, _ int) bool { return c == n-1 }},
		{name: "salt b, again", path: "/v1/completions", salt: "b", cached: func(c, _ int) bool { return c == n-1 }},
		{name: "no salt, again", path: "/v1/completions", cached: func(c, _ int) bool { return c == n-1 }},
		{name: "chat, salt c, first", path: "/v1/chat/completions", salt: "c", cached: zero},
		{name: "chat, salt d, first", path: "/v1/chat/completions", salt: "d", cached: zero},
		{name: "chat, salt c, again", path: "/v1/chat/completions", salt: "c", cached: all},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"max_tokens": 2, "temperature": 0}
			if tc.path == "/v1/completions" {
				body["prompt"] = saltPrompt
			} else {
				body["messages"] = chat
			}
			if tc.salt != nil {
				body["cache_salt"] = tc.salt
			}
			var res testhttp.Completion
			e.PostJSON(tc.path, body, http.StatusOK, &res)
			if c := res.Usage.PromptTokensDetails.CachedTokens; !tc.cached(c, res.Usage.PromptTokens) {
				t.Fatalf("%d of %d prompt tokens cached", c, res.Usage.PromptTokens)
			}
		})
	}
}

// zero and all are the cached counts of a prompt seen first under its salt and seen before
// (all of it but the last token, whose logits are computed).
func zero(c, _ int) bool     { return c == 0 }
func all(c, prompt int) bool { return c == prompt-1 }

// TestCacheSaltPerKey: with --cache-salt-per-key two bearer tokens sending the same prompt and
// the same cache_salt share nothing, each finds its own prompt again, and no cache_salt a
// client picks reaches another token's blocks.
func TestCacheSaltPerKey(t *testing.T) {
	e := newEnv(t, envOptions{cacheSaltPerKey: true})
	n := len(e.model.Vocab.Encode(saltPrompt, true, false))
	tests := []struct {
		name   string
		token  string
		salt   string
		cached int
	}{
		{name: "tenant 1", token: "key-1", salt: "s", cached: 0},
		{name: "tenant 2, same salt", token: "key-2", salt: "s", cached: 0},
		{name: "no token, same salt", salt: "s", cached: 0},
		{name: "tenant 1 again", token: "key-1", salt: "s", cached: n - 1},
		{name: "tenant 2 again", token: "key-2", salt: "s", cached: n - 1},
		{name: "no token again", salt: "s", cached: n - 1},
		{name: "tenant 2, another salt", token: "key-2", salt: "t", cached: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.token != "" {
				hdr = []string{"Authorization", "Bearer " + tc.token}
			}
			resp := e.Post(context.Background(), "/v1/completions",
				map[string]any{"prompt": saltPrompt, "max_tokens": 2, "temperature": 0, "cache_salt": tc.salt}, hdr...)
			defer resp.Body.Close()
			var res testhttp.Completion
			if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d, %v", resp.StatusCode, err)
			}
			if c := res.Usage.PromptTokensDetails.CachedTokens; c != tc.cached {
				t.Fatalf("%d cached tokens, want %d", c, tc.cached)
			}
		})
	}
}

// TestCacheSaltInvalid: a cache_salt that is not a short non-empty string is a 400 naming it,
// on every route that takes one.
func TestCacheSaltInvalid(t *testing.T) {
	e := newEnv(t, envOptions{embedder: "mean"})
	long := strings.Repeat("s", maxCacheSalt+1)
	tests := []struct {
		name string
		path string
		body string
	}{
		{name: "too long", path: "/v1/completions", body: `{"prompt":"Once","max_tokens":1,"cache_salt":"` + long + `"}`},
		{name: "empty", path: "/v1/completions", body: `{"prompt":"Once","max_tokens":1,"cache_salt":""}`},
		{name: "not a string", path: "/v1/completions", body: `{"prompt":"Once","max_tokens":1,"cache_salt":7}`},
		{name: "NUL", path: "/v1/completions", body: `{"prompt":"Once","max_tokens":1,"cache_salt":"a\u0000b"}`},
		{name: "chat", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"Hi"}],"cache_salt":"` + long + `"}`},
		{name: "llama.cpp", path: "/completion", body: `{"prompt":"Once","n_predict":1,"cache_salt":"` + long + `"}`},
		{name: "ollama", path: "/api/generate", body: `{"model":"stories","prompt":"Once","stream":false,"cache_salt":"` + long + `"}`},
		{name: "embeddings", path: "/v1/embeddings", body: `{"input":"Once","cache_salt":"` + long + `"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.Post(context.Background(), tc.path, tc.body)
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			// Ollama's routes answer in Ollama's error shape, {"error": "message"}, without param.
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), `"cache_salt"`) && !strings.Contains(string(data), "cache_salt is") {
				t.Fatalf("status %d: %s; want 400 naming cache_salt", resp.StatusCode, data)
			}
		})
	}
}

// TestCacheSaltTurnMemory: a chat turn remembered under a salt (its reply's generated tokens,
// for the next turn) is found for the next turn under that salt only: a conversation continued
// under another salt or none is tokenized afresh, so its prompt_tokens cannot tell that the
// conversation took place.
func TestCacheSaltTurnMemory(t *testing.T) {
	e := synthEnv(t, synthOptions{arch: "llama"})
	msgs := []map[string]string{{"role": "user", "content": "Tell me about a cat."}}
	var r turnUsage
	e.PostJSON("/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 24, "temperature": 0, "cache_salt": "a"},
		http.StatusOK, &r)
	msgs = append(msgs, map[string]string{"role": "assistant", "content": r.Choices[0].Message.Content},
		map[string]string{"role": "user", "content": "And then?"})
	raw, _ := json.Marshal(msgs)
	text, err := e.srv.RenderChat(raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	full := e.model.Vocab.Encode(text, true, true)
	tests := []struct {
		name  string
		salt  string
		found bool
	}{
		{name: "same salt", salt: "a", found: true},
		{name: "another salt", salt: "b"},
		{name: "no salt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, n := e.srv.reuseTurn(turnNamespace(context.Background(), tc.salt), text, full, raw)
			if (n > 0) != tc.found {
				t.Fatalf("%d tokens from the turn memory, want some: %v", n, tc.found)
			}
		})
	}
}
