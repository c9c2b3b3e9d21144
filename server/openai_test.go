package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// referenceGreedy returns llama.cpp's greedy continuation of "Once upon a time" for stories260K.
func referenceGreedy(t *testing.T) (prompt, text string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(sharedDir(t), "reference", "stories260K.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Prompt     string `json:"prompt"`
		GreedyText string `json:"greedy_text"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	return ref.Prompt, ref.GreedyText
}

func TestCompletionGreedyMatchesReference(t *testing.T) {
	e := newEnv(t, envOptions{})
	prompt, want := referenceGreedy(t)
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
