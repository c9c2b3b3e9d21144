package llamacpp

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"ubatch/server"
	"ubatch/server/servertest"
)

// TestTokenizeVLLM: vLLM's /tokenize and /detokenize bodies round-trip; their answers have
// vLLM's keys and llama.cpp's keep theirs exactly.
func TestTokenizeVLLM(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	v := e.Model.Vocab
	type tokenized struct {
		Tokens      []int32  `json:"tokens"`
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		TokenStrs   []string `json:"token_strs"`
	}
	for _, tc := range []struct {
		name    string
		prompt  string
		special *bool
	}{
		{name: "plain", prompt: "Once upon a time"},
		{name: "no special tokens", prompt: "Once upon a time", special: new(bool)},
		{name: "multi-byte", prompt: "café 😀 漢字"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"model": "m", "prompt": tc.prompt, "return_token_strs": true}
			add := true
			if tc.special != nil {
				body["add_special_tokens"], add = *tc.special, *tc.special
			}
			var tok tokenized
			e.PostJSON("/tokenize", body, http.StatusOK, &tok)
			if want := v.Encode(tc.prompt, add, true); !slices.Equal(tok.Tokens, want) {
				t.Fatalf("tokens %v, want %v", tok.Tokens, want)
			}
			if tok.Count != len(tok.Tokens) || tok.MaxModelLen != e.Engine.Limits().NCtx || len(tok.TokenStrs) != tok.Count {
				t.Fatalf("count %d, max_model_len %d (want %d), %d token_strs for %d tokens",
					tok.Count, tok.MaxModelLen, e.Engine.Limits().NCtx, len(tok.TokenStrs), len(tok.Tokens))
			}
			var det map[string]string
			e.PostJSON("/detokenize", map[string]any{"model": "m", "tokens": tok.Tokens}, http.StatusOK, &det)
			// BOS takes the first SPM space away, as on llama.cpp's route (TestTokenizeDetokenize).
			if got, ok := det["prompt"]; len(det) != 1 || !ok || strings.TrimPrefix(got, " ") != tc.prompt {
				t.Fatalf("detokenize answered %v, want {\"prompt\": %q}", det, tc.prompt)
			}
		})
	}
	t.Run("chat", func(t *testing.T) {
		msgs := []map[string]any{{"role": "user", "content": "Tell me a story."}}
		var tok tokenized
		e.PostJSON("/tokenize", map[string]any{"model": "m", "messages": msgs, "add_generation_prompt": true}, http.StatusOK, &tok)
		var res struct {
			Usage server.UsageJSON `json:"usage"`
		}
		e.PostJSON("/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1}, http.StatusOK, &res)
		if tok.Count == 0 || tok.Count != res.Usage.PromptTokens {
			t.Fatalf("chat tokenize counts %d tokens, the chat route's prompt has %d", tok.Count, res.Usage.PromptTokens)
		}
	})
	t.Run("llama.cpp bodies unchanged", func(t *testing.T) {
		var tok map[string]json.RawMessage
		e.PostJSON("/tokenize", map[string]any{"content": "Once upon a time"}, http.StatusOK, &tok)
		var det map[string]string
		e.PostJSON("/detokenize", map[string]any{"tokens": tok["tokens"]}, http.StatusOK, &det)
		if len(tok) != 1 || tok["tokens"] == nil || len(det) != 1 || det["content"] != "Once upon a time" {
			t.Fatalf("llama.cpp's answers changed: %v, %v", tok, det)
		}
	})
	for _, tc := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{name: "content and prompt", body: map[string]any{"content": "a", "prompt": "a"}, field: "prompt"},
		{name: "content and messages", body: map[string]any{"content": "a", "messages": []map[string]any{{"role": "user", "content": "a"}}}, field: "messages"},
		{name: "prompt and messages", body: map[string]any{"prompt": "a", "messages": []map[string]any{{"role": "user", "content": "a"}}}, field: "messages"},
		{name: "no generation prompt", body: map[string]any{"messages": []map[string]any{{"role": "user", "content": "a"}}, "add_generation_prompt": false}, field: "add_generation_prompt"},
		{name: "prompt not a string", body: map[string]any{"prompt": 3}, field: "prompt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.CheckBadParam(t, "/tokenize", tc.body, tc.field, "")
		})
	}
}
