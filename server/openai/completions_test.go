package openai_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"ubatch/internal/testkit"
	"ubatch/server/servertest"
)

func TestCompletionGreedyMatchesReference(t *testing.T) {
	e := newEnv(t)
	prompt, want := servertest.ReferenceGreedy(t)
	res := e.complete(map[string]any{"prompt": prompt, "max_tokens": 30, "temperature": 0})
	if len(res.Choices) != 1 {
		t.Fatalf("got %d choices", len(res.Choices))
	}
	got := res.Choices[0].Text
	if got == "" || !strings.HasPrefix(want, got) {
		t.Fatalf("greedy text %q is not a prefix of llama.cpp's %q", got, want)
	}
	if res.Choices[0].FinishReason != "length" || res.Usage.CompletionTokens != 30 {
		t.Fatalf("finish %q, usage %+v; want length after 30 tokens", res.Choices[0].FinishReason, res.Usage)
	}
	if res.Usage.PromptTokens != 5 || res.Usage.TotalTokens != 35 {
		t.Fatalf("usage %+v: want 5 prompt tokens (BOS + 4), 35 total", res.Usage)
	}
	if res.Object != "text_completion" || res.Model != "stories" || !strings.HasPrefix(res.ID, "cmpl-") {
		t.Fatalf("response header fields: %+v", res)
	}
}

func TestCompletionStopStrings(t *testing.T) {
	e := newEnv(t)
	prompt, full := servertest.ReferenceGreedy(t)
	tests := []struct {
		name string
		stop any
		want string
	}{
		{name: "single string", stop: "Lily", want: full[:strings.Index(full, "Lily")]},
		{name: "list, earliest wins", stop: []string{"park", "girl"}, want: full[:strings.Index(full, "girl")]},
		{name: "spans tokens", stop: "tle gi", want: full[:strings.Index(full, "tle gi")]},
		{name: "never matches", stop: []string{"dragon"}, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"prompt": prompt, "max_tokens": 30, "temperature": 0, "stop": tc.stop}
			res := e.complete(body)
			c := res.Choices[0]
			wantFinish := "stop"
			if tc.want == "" {
				tc.want, wantFinish = c.Text, "length"
				if !strings.HasPrefix(full, c.Text) || len(c.Text) < 20 {
					t.Fatalf("text %q is not llama.cpp's greedy text", c.Text)
				}
			}
			if c.Text != tc.want || c.FinishReason != wantFinish {
				t.Fatalf("text %q finish %q, want %q finish %q", c.Text, c.FinishReason, tc.want, wantFinish)
			}
			if wantFinish == "stop" && (res.Usage.CompletionTokens == 0 || res.Usage.CompletionTokens >= 30) {
				t.Fatalf("completion tokens %d after a stop string", res.Usage.CompletionTokens)
			}
			text, finish, _ := e.streamCompletion(body)
			if text != tc.want || finish != wantFinish {
				t.Fatalf("streamed text %q finish %q, want %q finish %q", text, finish, tc.want, wantFinish)
			}
		})
	}
	testkit.Eventually(t, 5*time.Second, "KV released after stop-string cancellations", func() bool { return e.kvUsed() == 0 })
}

func TestCompletionNAndPromptLists(t *testing.T) {
	e := newEnv(t)
	greedy := e.complete(map[string]any{"prompt": "The cat sat", "max_tokens": 10, "temperature": 0})
	t.Run("greedy n=3 gives identical choices", func(t *testing.T) {
		res := e.complete(map[string]any{"prompt": "The cat sat", "max_tokens": 10, "temperature": 0, "n": 3})
		if len(res.Choices) != 3 {
			t.Fatalf("%d choices", len(res.Choices))
		}
		for i, c := range res.Choices {
			if c.Index != i || c.Text != greedy.Choices[0].Text {
				t.Fatalf("choice %d: index %d text %q, want %q", i, c.Index, c.Text, greedy.Choices[0].Text)
			}
		}
		if res.Usage.PromptTokens != greedy.Usage.PromptTokens || res.Usage.CompletionTokens != 30 {
			t.Fatalf("usage %+v: prompt counted once (%d), completions summed (30)", res.Usage, greedy.Usage.PromptTokens)
		}
	})
	t.Run("sampled n=4 with a seed is reproducible and varied", func(t *testing.T) {
		body := map[string]any{"prompt": "The cat sat", "max_tokens": 12, "temperature": 1.5, "seed": 7, "n": 4}
		a, b := e.complete(body), e.complete(body)
		distinct := map[string]bool{}
		for i := range a.Choices {
			if a.Choices[i].Text != b.Choices[i].Text {
				t.Fatalf("choice %d differs between runs with one seed: %q vs %q", i, a.Choices[i].Text, b.Choices[i].Text)
			}
			distinct[a.Choices[i].Text] = true
		}
		if len(distinct) < 2 {
			t.Fatalf("4 sampled sequences are all %q: they are not independent", a.Choices[0].Text)
		}
	})
	t.Run("list of prompts and token ids", func(t *testing.T) {
		toks := e.Model.Vocab.Encode("The cat sat", true, true)
		res := e.complete(map[string]any{"prompt": []any{"Once upon a time", toks}, "max_tokens": 10, "temperature": 0, "n": 2})
		if len(res.Choices) != 4 || res.Choices[2].Text != greedy.Choices[0].Text || res.Choices[3].Text != greedy.Choices[0].Text {
			t.Fatalf("choices %+v: want 4, the last two %q", res.Choices, greedy.Choices[0].Text)
		}
		if res.Choices[0].Text == res.Choices[2].Text {
			t.Fatal("the two prompts gave one text")
		}
	})
	t.Run("n sequences compute their prompt once", func(t *testing.T) {
		prompt := strings.Repeat("The little dog ran to the big red ball in the park. ", 12)
		st0 := e.Engine.Stats()
		res := e.complete(map[string]any{"prompt": prompt, "max_tokens": 4, "temperature": 0, "n": 4})
		computed := int(e.Engine.Stats().PromptComputed - st0.PromptComputed)
		n := res.Usage.PromptTokens
		// The first sequence computes the prompt; the others only its last, partial block.
		if n < 100 || computed > n+3*16 {
			t.Fatalf("4 sequences of a %d-token prompt computed %d prompt tokens", n, computed)
		}
		for _, c := range res.Choices[1:] {
			if c.Text != res.Choices[0].Text {
				t.Fatalf("greedy choices differ: %q vs %q", c.Text, res.Choices[0].Text)
			}
		}
	})
	t.Run("streamed n=2 interleaves choices", func(t *testing.T) {
		_, _, events := e.streamCompletion(map[string]any{"prompt": "The cat sat", "max_tokens": 10, "temperature": 0, "n": 2})
		texts := map[int]string{}
		finished := map[int]bool{}
		for _, ev := range events[:len(events)-1] {
			var ch servertest.Completion
			if err := json.Unmarshal([]byte(ev), &ch); err != nil {
				t.Fatal(err)
			}
			for _, c := range ch.Choices {
				texts[c.Index] += c.Text
				if c.FinishReason != "" {
					finished[c.Index] = true
				}
			}
		}
		if texts[0] != greedy.Choices[0].Text || texts[1] != greedy.Choices[0].Text || !finished[0] || !finished[1] {
			t.Fatalf("texts %v finished %v", texts, finished)
		}
	})
}

// TestCompletionNStopStrings: one engine stream carries a request's n sequences, and a stop
// string cancels its sequence alone; each choice ends once, and usage counts every choice.
func TestCompletionNStopStrings(t *testing.T) {
	e := newEnv(t)
	body := map[string]any{"prompt": "The cat sat", "max_tokens": 40, "temperature": 1.5, "seed": 7, "n": 4,
		"stop": []string{"e"}, "stream_options": map[string]any{"include_usage": true}}
	_, _, events := e.streamCompletion(body)
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q: want chunks, a usage chunk, then [DONE]", events)
	}
	texts := map[int]string{}
	finish := map[int]string{}
	for _, ev := range events[:len(events)-2] {
		var ch servertest.Completion
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			t.Fatal(err)
		}
		for _, c := range ch.Choices {
			if finish[c.Index] != "" {
				t.Fatalf("choice %d: chunk %s after its finish", c.Index, ev)
			}
			texts[c.Index] += c.Text
			finish[c.Index] = c.FinishReason
		}
	}
	var usage servertest.Completion
	if err := json.Unmarshal([]byte(events[len(events)-2]), &usage); err != nil {
		t.Fatal(err)
	}
	stopped := 0
	for i := range 4 {
		if strings.Contains(texts[i], "e") || finish[i] != "stop" && finish[i] != "length" {
			t.Fatalf("choice %d: text %q finish %q", i, texts[i], finish[i])
		}
		if finish[i] == "stop" {
			stopped++
		}
	}
	if stopped == 0 || usage.Usage.CompletionTokens < 4 || usage.Usage.CompletionTokens >= 4*40 {
		t.Fatalf("finishes %v, usage %+v: want the stop string to end choices, and their tokens counted", finish, usage.Usage)
	}
}

func TestCompletionLogprobs(t *testing.T) {
	e := newEnv(t)
	res := e.complete(map[string]any{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "logprobs": 3})
	c := res.Choices[0]
	lp := c.Logprobs
	if lp == nil || len(lp.Tokens) != 8 || len(lp.TokenLogprobs) != 8 || len(lp.TopLogprobs) != 8 || len(lp.TextOffset) != 8 {
		t.Fatalf("logprobs %+v: want 8 entries in each list", lp)
	}
	if strings.Join(lp.Tokens, "") != c.Text {
		t.Fatalf("tokens %q do not spell the text %q", lp.Tokens, c.Text)
	}
	for i := range lp.Tokens {
		if len(lp.TopLogprobs[i]) != 3 {
			t.Fatalf("token %d: %d alternatives, want 3", i, len(lp.TopLogprobs[i]))
		}
		best := -1e9
		for _, v := range lp.TopLogprobs[i] {
			best = max(best, v)
		}
		// Greedy picks the most likely token, so its log-probability is the best alternative's.
		if lp.TokenLogprobs[i] > 0 || lp.TokenLogprobs[i] != best || lp.TopLogprobs[i][lp.Tokens[i]] != best {
			t.Fatalf("token %d (%q): logprob %v, alternatives %v", i, lp.Tokens[i], lp.TokenLogprobs[i], lp.TopLogprobs[i])
		}
		if !strings.HasPrefix(c.Text[lp.TextOffset[i]:], lp.Tokens[i]) {
			t.Fatalf("text_offset %d of token %q is wrong in %q", lp.TextOffset[i], lp.Tokens[i], c.Text)
		}
	}
	plain := e.complete(map[string]any{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
	if plain.Choices[0].Logprobs != nil || plain.Choices[0].Text != c.Text {
		t.Fatalf("without logprobs: %+v", plain.Choices[0])
	}
}

// TestCompletionStreamFormat checks the chunk sequence: text chunks with usage null, a final
// chunk with finish_reason, a usage chunk with no choices, then [DONE].
func TestCompletionStreamFormat(t *testing.T) {
	e := newEnv(t)
	want := e.complete(map[string]any{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0})
	_, _, events := e.streamCompletion(map[string]any{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0,
		"stream_options": map[string]any{"include_usage": true}})
	if len(events) < 4 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q: want chunks then [DONE]", events)
	}
	var text strings.Builder
	for i, ev := range events[:len(events)-2] {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(ev), &raw); err != nil {
			t.Fatal(err)
		}
		if string(raw["usage"]) != "null" || string(raw["object"]) != `"text_completion"` {
			t.Fatalf("chunk %d %s: want usage null and object text_completion", i, ev)
		}
		var ch servertest.Completion
		json.Unmarshal([]byte(ev), &ch)
		if len(ch.Choices) != 1 {
			t.Fatalf("chunk %d has %d choices", i, len(ch.Choices))
		}
		text.WriteString(ch.Choices[0].Text)
		last := i == len(events)-3
		if (ch.Choices[0].FinishReason != "") != last {
			t.Fatalf("chunk %d finish_reason %q (last chunk: %v)", i, ch.Choices[0].FinishReason, last)
		}
	}
	if text.String() != want.Choices[0].Text {
		t.Fatalf("streamed %q, want %q", text.String(), want.Choices[0].Text)
	}
	var final servertest.Completion
	if err := json.Unmarshal([]byte(events[len(events)-2]), &final); err != nil {
		t.Fatal(err)
	}
	// The first request's cells hold this prompt's first 4 tokens (all but the last, whose logits
	// are needed): they are copied from its first block instead of computed.
	wantUsage := want.Usage
	wantUsage.PromptTokensDetails.CachedTokens = 4
	if len(final.Choices) != 0 || final.Usage != wantUsage {
		t.Fatalf("usage chunk %s, want no choices and usage %+v", events[len(events)-2], wantUsage)
	}
	_, _, plain := e.streamCompletion(map[string]any{"prompt": "Once upon a time", "max_tokens": 3})
	for _, ev := range plain[:len(plain)-1] {
		if strings.Contains(ev, `"usage"`) {
			t.Fatalf("chunk %s has usage although include_usage was not set", ev)
		}
	}
}
