package server

import (
	"fmt"
	"net/http"
	"testing"

	"ubatch/internal/testdata"
)

type turnUsage struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// TestNextTurnRecomputesOnlyItsMessage: a conversation with stories260K that resends its
// history, turn after turn, finds all of the previous turn in the KV cache: its prompt and every
// generated token but the last, which was sampled and never decoded (so cached >= previous
// prompt + completion - 1). stories260K writes words in tokens its tokenizer would not choose,
// so re-tokenizing the reply loses the cache from the first such token on; the turn memory
// gives the next turn the tokens the model generated instead. Templates: ChatML (the fallback:
// its markers are plain text to this vocabulary), Llama 3.1 and Phi-3.5.
func TestNextTurnRecomputesOnlyItsMessage(t *testing.T) {
	tests := []struct {
		name     string
		synth    bool   // a mini synth Llama (random weights, 320-token vocabulary) instead of stories260K
		template string // a file of ../shared/templates; "" = the ChatML fallback
	}{
		{name: "chatml"},
		{name: "llama 3.1", template: "meta-llama-Llama-3.1-8B-Instruct.jinja"},
		{name: "phi 3.5", template: "microsoft-Phi-3.5-mini-instruct.jinja"},
		// Random weights write tokens the tokenizer would not choose, and bytes that are not UTF-8:
		// without the turn memory turn 2 found only its 117 prompt tokens of the 140 it could
		// have (the reply recomputed whole), because of a reply that started with a lone byte.
		{name: "synth chatml", synth: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var e *testEnv
			if tc.synth {
				e = synthEnv(t, synthOptions{arch: "llama"})
			} else {
				var tmpl string
				if tc.template != "" {
					tmpl = string(testdata.ReadFile(t, "templates/"+tc.template))
				}
				e = newEnv(t, envOptions{chatTemplate: tmpl, nCtx: 2048})
			}
			msgs := []map[string]string{
				{"role": "system", "content": "You tell short stories."},
				{"role": "user", "content": "Tell me about a cat."},
			}
			recovered := 0
			prev := 0 // the previous turn's prompt + completion
			for turn := 1; turn <= 4; turn++ {
				var r turnUsage
				e.PostJSON("/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 24, "temperature": 0},
					http.StatusOK, &r)
				u := r.Usage
				t.Logf("turn %d: prompt %d, cached %d, completion %d", turn, u.PromptTokens, u.PromptTokensDetails.CachedTokens, u.CompletionTokens)
				if turn > 1 && u.PromptTokensDetails.CachedTokens < prev-1 {
					t.Fatalf("turn %d: %d of %d prompt tokens cached, want >= %d (the previous turn's prompt and completion, less its last token)",
						turn, u.PromptTokensDetails.CachedTokens, u.PromptTokens, prev-1)
				}
				if u.CompletionTokens == 0 {
					t.Fatalf("turn %d: no completion", turn)
				}
				prev = u.PromptTokens + u.CompletionTokens
				msgs = append(msgs, map[string]string{"role": "assistant", "content": r.Choices[0].Message.Content},
					map[string]string{"role": "user", "content": fmt.Sprintf("And then what happened on day %d?", turn)})
				recovered++
			}
			if recovered != 4 {
				t.Fatalf("%d turns", recovered)
			}
		})
	}
}

// TestTurnMemoBounds: the turn memory keeps the most recently used entries within its count
// and byte bounds, and drops an entry larger than all of it.
func TestTurnMemoBounds(t *testing.T) {
	tests := []struct {
		name      string
		items     int
		bytes     int
		puts      []string // keys, each with 2 tokens (8 bytes)
		get       string   // looked up between the puts' halves (refreshes it)
		wantKept  []string
		wantGone  []string
		wantBytes int
	}{
		{name: "count", items: 2, bytes: 1 << 20, puts: []string{"a", "b", "c"}, wantKept: []string{"b", "c"}, wantGone: []string{"a"}, wantBytes: 18},
		{name: "get refreshes", items: 2, bytes: 1 << 20, puts: []string{"a", "b", "c"}, get: "a", wantKept: []string{"a", "c"}, wantGone: []string{"b"}, wantBytes: 18},
		{name: "bytes", items: 100, bytes: 20, puts: []string{"aa", "bb", "cc"}, wantKept: []string{"cc", "bb"}, wantGone: []string{"aa"}, wantBytes: 20},
		{name: "too large", items: 100, bytes: 8, puts: []string{"toolarge"}, wantGone: []string{"toolarge"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newTurnMemo(tc.items, tc.bytes)
			half := (len(tc.puts) + 1) / 2
			for _, k := range tc.puts[:half] {
				m.put(k, []int32{1, 2})
			}
			if tc.get != "" && m.get(tc.get) == nil {
				t.Fatalf("%q missing", tc.get)
			}
			for _, k := range tc.puts[half:] {
				m.put(k, []int32{1, 2})
			}
			for _, k := range tc.wantKept {
				if m.get(k) == nil {
					t.Errorf("%q was dropped", k)
				}
			}
			for _, k := range tc.wantGone {
				if m.get(k) != nil {
					t.Errorf("%q was kept", k)
				}
			}
			if m.bytes != tc.wantBytes {
				t.Errorf("%d bytes, want %d", m.bytes, tc.wantBytes)
			}
		})
	}
}
