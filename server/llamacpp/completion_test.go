package llamacpp

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"ubatch/server/servertest"
)

func TestLlamaCompletion(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	prompt, full := servertest.ReferenceGreedy(t)
	t.Run("non-streaming", func(t *testing.T) {
		var res llamaCompletion
		e.PostJSON("/completion", map[string]any{"prompt": prompt, "n_predict": 20, "temperature": 0, "cache_prompt": true}, http.StatusOK, &res)
		if !res.Stop || res.StopType != "limit" || res.TokensPredicted != 20 || res.TokensEvaluated != 5 {
			t.Fatalf("summary %+v", res)
		}
		if !strings.HasPrefix(full, res.Content) || len(res.Content) < 20 {
			t.Fatalf("content %q is not llama.cpp's greedy text", res.Content)
		}
		if res.Timings == nil || res.Timings.PredictedN != 20 || res.Timings.PromptN+res.Timings.CacheN != 5 || res.Timings.PredictedMS <= 0 {
			t.Fatalf("timings %+v", res.Timings)
		}
	})
	t.Run("stop word", func(t *testing.T) {
		var res llamaCompletion
		e.PostJSON("/completion", map[string]any{"prompt": prompt, "n_predict": 30, "temperature": 0, "stop": []string{"Lily"}}, http.StatusOK, &res)
		if res.StopType != "word" || res.StoppingWord != "Lily" || res.Content != full[:strings.Index(full, "Lily")] {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("n_predict 0 evaluates nothing", func(t *testing.T) {
		var res llamaCompletion
		e.PostJSON("/completion", map[string]any{"prompt": prompt, "n_predict": 0}, http.StatusOK, &res)
		if !res.Stop || res.Content != "" || res.TokensPredicted != 0 || res.TokensEvaluated != 5 {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("streaming", func(t *testing.T) {
		resp := e.Post(context.Background(), "/completion", map[string]any{"prompt": prompt, "n_predict": 20, "temperature": 0,
			"stream": true, "return_tokens": true})
		defer resp.Body.Close()
		events := servertest.SSEEvents(t, resp.Body)
		var content strings.Builder
		ntok := 0
		for i, ev := range events {
			var c llamaCompletion
			if err := json.Unmarshal([]byte(ev), &c); err != nil {
				t.Fatalf("event %q: %v", ev, err)
			}
			last := i == len(events)-1
			if c.Stop != last {
				t.Fatalf("event %d %s: stop %v", i, ev, c.Stop)
			}
			content.WriteString(c.Content)
			ntok += len(c.Tokens)
			if last && (c.TokensPredicted != 20 || c.StopType != "limit" || c.Timings == nil) {
				t.Fatalf("final event %s", ev)
			}
		}
		if !strings.HasPrefix(full, content.String()) || ntok != 20 {
			t.Fatalf("streamed %q with %d tokens", content.String(), ntok)
		}
	})
	t.Run("defaults are llama.cpp's", func(t *testing.T) {
		// Without temperature the llama.cpp route samples (0.8, top-k 40...): with different seeds
		// the texts differ at some point.
		texts := map[string]bool{}
		for seed := range 4 {
			var res llamaCompletion
			e.PostJSON("/completion", map[string]any{"prompt": prompt, "n_predict": 24, "seed": seed}, http.StatusOK, &res)
			texts[res.Content] = true
		}
		if len(texts) < 2 {
			t.Fatalf("4 seeds gave one text %v: sampling is not on by default", texts)
		}
	})
}

func TestTokenizeDetokenize(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	tests := []struct {
		name    string
		content string
		special bool
	}{
		{name: "plain", content: "Once upon a time"},
		{name: "with BOS", content: "Once upon a time", special: true},
		{name: "multi-byte", content: "café 😀"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tok struct {
				Tokens []int32 `json:"tokens"`
			}
			e.PostJSON("/tokenize", map[string]any{"content": tc.content, "add_special": tc.special}, http.StatusOK, &tok)
			want := e.Model.Vocab.Encode(tc.content, tc.special, true)
			if len(tok.Tokens) != len(want) {
				t.Fatalf("tokens %v, want %v", tok.Tokens, want)
			}
			for i := range want {
				if tok.Tokens[i] != want[i] {
					t.Fatalf("tokens %v, want %v", tok.Tokens, want)
				}
			}
			if tc.special && tok.Tokens[0] != e.Model.Vocab.BOS() {
				t.Fatalf("add_special did not add BOS: %v", tok.Tokens)
			}
			var det struct {
				Content string `json:"content"`
			}
			e.PostJSON("/detokenize", map[string]any{"tokens": tok.Tokens}, http.StatusOK, &det)
			// Like llama.cpp, only the first token's SPM space is dropped, and BOS is that token.
			if got := det.Content; got != tc.content && !(tc.special && got == " "+tc.content) {
				t.Fatalf("detokenize gave %q, want %q", det.Content, tc.content)
			}
			var pieces struct {
				Tokens []struct {
					ID    int32 `json:"id"`
					Piece any   `json:"piece"`
				} `json:"tokens"`
			}
			e.PostJSON("/tokenize", map[string]any{"content": tc.content, "add_special": tc.special, "with_pieces": true}, http.StatusOK, &pieces)
			var spelled []byte
			for i, p := range pieces.Tokens {
				if p.ID != want[i] {
					t.Fatalf("piece %d id %d, want %d", i, p.ID, want[i])
				}
				switch v := p.Piece.(type) {
				case string:
					spelled = append(spelled, v...)
				case []any:
					for _, b := range v {
						spelled = append(spelled, byte(b.(float64)))
					}
				default:
					t.Fatalf("piece %d is %T", i, p.Piece)
				}
			}
			if strings.TrimPrefix(string(spelled), " ") != tc.content {
				t.Fatalf("pieces spell %q, want %q", spelled, tc.content)
			}
		})
	}
}

// TestNProbs: /completion with n_probs returns llama.cpp's completion_probabilities: each token
// with its log-probability and the top n, the chosen token first under greedy decoding.
func TestNProbs(t *testing.T) {
	e := newEnv(t, servertest.Options{})
	var resp struct {
		Content string `json:"content"`
		Probs   []struct {
			ID          int32   `json:"id"`
			Token       string  `json:"token"`
			Logprob     float64 `json:"logprob"`
			TopLogprobs []struct {
				ID      int32   `json:"id"`
				Logprob float64 `json:"logprob"`
			} `json:"top_logprobs"`
		} `json:"completion_probabilities"`
	}
	e.PostJSON("/completion", map[string]any{"prompt": "Once upon a time", "n_predict": 5, "temperature": 0, "n_probs": 3}, http.StatusOK, &resp)
	if len(resp.Probs) != 5 {
		t.Fatalf("%d probabilities for 5 tokens: %+v", len(resp.Probs), resp)
	}
	for i, p := range resp.Probs {
		if len(p.TopLogprobs) != 3 || p.TopLogprobs[0].ID != p.ID || p.Logprob > 0 || p.TopLogprobs[1].Logprob > p.TopLogprobs[0].Logprob {
			t.Errorf("token %d: %+v", i, p)
		}
	}
}
