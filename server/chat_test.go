package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"ubatch/chat"
	"ubatch/internal/testhttp"
)

type chatResult struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Logprobs     *chatLogprobs `json:"logprobs"`
		FinishReason string        `json:"finish_reason"`
	} `json:"choices"`
	Usage testhttp.Usage `json:"usage"`
}

// TestChatFallbackTemplate checks that a model without a chat template is prompted with ChatML,
// BOS first, and that the chat route generates what the completions route does for those tokens.
func TestChatFallbackTemplate(t *testing.T) {
	e := newEnv(t, envOptions{})
	if e.model.ChatTemplate() != "" {
		t.Fatal("stories260K unexpectedly has a chat template; the test wants the fallback")
	}
	msgs := []map[string]any{
		{"role": "system", "content": "You tell stories."},
		{"role": "user", "content": []any{map[string]any{"type": "text", "text": "Tell me about a cat."}}},
	}
	rendered, err := chat.Fallback().Render(msgs, chat.Options{AddGenerationPrompt: true, BOS: "<s>", EOS: "</s>"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rendered, "<|im_start|>system\nYou tell stories.<|im_end|>") {
		t.Fatalf("fallback rendering %q is not ChatML", rendered)
	}
	want := append([]int32{e.model.Vocab.BOS()}, e.model.Vocab.Encode(rendered, false, true)...)
	var res chatResult
	e.PostJSON("/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 16, "temperature": 0}, http.StatusOK, &res)
	if res.Object != "chat.completion" || !strings.HasPrefix(res.ID, "chatcmpl-") || len(res.Choices) != 1 {
		t.Fatalf("response %+v", res)
	}
	c := res.Choices[0]
	if c.Message.Role != "assistant" || c.Message.Content == "" || c.FinishReason == "" {
		t.Fatalf("choice %+v", c)
	}
	if res.Usage.PromptTokens != len(want) {
		t.Fatalf("prompt tokens %d, want %d (BOS + the ChatML rendering)", res.Usage.PromptTokens, len(want))
	}
	same := e.Complete(map[string]any{"prompt": want, "max_tokens": 16, "temperature": 0})
	if same.Choices[0].Text != c.Message.Content {
		t.Fatalf("chat content %q, completions on the same tokens %q", c.Message.Content, same.Choices[0].Text)
	}

	t.Run("stream", func(t *testing.T) {
		body := map[string]any{"messages": msgs, "max_completion_tokens": 16, "temperature": 0, "stream": true,
			"stream_options": map[string]any{"include_usage": true}}
		resp := e.Post(context.Background(), "/v1/chat/completions", body)
		defer resp.Body.Close()
		events := sseEvents(t, resp.Body)
		if len(events) < 5 || events[len(events)-1] != "[DONE]" {
			t.Fatalf("events %q", events)
		}
		type chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				Index        int             `json:"index"`
				Delta        json.RawMessage `json:"delta"`
				FinishReason *string         `json:"finish_reason"`
			} `json:"choices"`
			Usage *UsageJSON `json:"usage"`
		}
		var content strings.Builder
		for i, ev := range events[:len(events)-1] {
			var ch chunk
			if err := json.Unmarshal([]byte(ev), &ch); err != nil {
				t.Fatal(err)
			}
			if ch.Object != "chat.completion.chunk" {
				t.Fatalf("chunk %d object %q", i, ch.Object)
			}
			switch {
			case i == 0:
				if string(ch.Choices[0].Delta) != `{"role":"assistant","content":""}` {
					t.Fatalf("first chunk %s: want the assistant role", ev)
				}
			case i == len(events)-2:
				if len(ch.Choices) != 0 || ch.Usage == nil || ch.Usage.PromptTokens != res.Usage.PromptTokens ||
					ch.Usage.CompletionTokens != res.Usage.CompletionTokens || ch.Usage.PromptTokensDetails.CachedTokens == 0 {
					t.Fatalf("usage chunk %s, want usage %+v with cached tokens (the prompt was seen before)", ev, res.Usage)
				}
			case i == len(events)-3:
				if string(ch.Choices[0].Delta) != `{}` || ch.Choices[0].FinishReason == nil || *ch.Choices[0].FinishReason != c.FinishReason {
					t.Fatalf("final chunk %s: want an empty delta and finish_reason %q", ev, c.FinishReason)
				}
			default:
				var d chatDelta
				json.Unmarshal(ch.Choices[0].Delta, &d)
				if d.Content == nil || d.Role != "" || ch.Choices[0].FinishReason != nil {
					t.Fatalf("content chunk %s", ev)
				}
				content.WriteString(*d.Content)
			}
		}
		if content.String() != c.Message.Content {
			t.Fatalf("streamed %q, want %q", content.String(), c.Message.Content)
		}
	})

	t.Run("logprobs", func(t *testing.T) {
		var lres chatResult
		e.PostJSON("/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 6, "temperature": 0,
			"logprobs": true, "top_logprobs": 2}, http.StatusOK, &lres)
		lp := lres.Choices[0].Logprobs
		if lp == nil || len(lp.Content) != lres.Usage.CompletionTokens {
			t.Fatalf("logprobs %+v for %d tokens", lp, lres.Usage.CompletionTokens)
		}
		var spelled []byte
		for _, tok := range lp.Content {
			if len(tok.TopLogprobs) != 2 || tok.TopLogprobs[0].Logprob != tok.Logprob || tok.TopLogprobs[0].Logprob < tok.TopLogprobs[1].Logprob {
				t.Fatalf("token %+v: greedy token must be the top alternative", tok)
			}
			for _, b := range tok.Bytes {
				spelled = append(spelled, byte(b))
			}
		}
		if string(spelled) != lres.Choices[0].Message.Content {
			t.Fatalf("bytes spell %q, content %q", spelled, lres.Choices[0].Message.Content)
		}
	})

	t.Run("n=2", func(t *testing.T) {
		var nres chatResult
		e.PostJSON("/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 16, "temperature": 0, "n": 2}, http.StatusOK, &nres)
		if len(nres.Choices) != 2 || nres.Choices[1].Index != 1 || nres.Choices[1].Message.Content != c.Message.Content {
			t.Fatalf("choices %+v", nres.Choices)
		}
	})
}
