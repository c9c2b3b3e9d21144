package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"ubatch/engine"
	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	"ubatch/quant"
	"ubatch/runner"
)

// TestHybridServes serves the hybrid qwen35 (a recurrent state per sequence beside the KV
// blocks) end to end: llama.cpp's greedy text from /v1/completions with n = 3 (three sequences
// with their own states in the same steps), and a chat completion through the ChatML fallback
// with n = 2, both choices the same greedy text.
func TestHybridServes(t *testing.T) {
	const name = "synth-qwen35-f16"
	ref := testdata.ReadReference(t, name)
	m := testmodel.Open(t, testdata.Model(t, "arch/"+name+".gguf"))
	lctx := testmodel.Runtime(t, m, runner.Options{NCtx: 512, NBatch: 256, NUBatch: 64, NSeqMax: 4, KVType: quant.F16, Threads: 2})
	eng := testmodel.Engine(t, m, lctx, engine.Config{ChunkSize: 16})
	stop := testmodel.Run(t, eng)
	srv, err := New(Config{Model: m, Engine: eng, ModelID: "qwen35", Dialects: testDialects})
	if err != nil {
		t.Fatal(err)
	}
	e := serveEnv(t, m, eng, srv, stop, &http.Client{Timeout: 60 * time.Second})

	const n = 8
	res := e.Complete(map[string]any{"prompt": ref.Prompt, "max_tokens": n, "temperature": 0, "n": 3})
	if len(res.Choices) != 3 || res.Usage.CompletionTokens != 3*n {
		t.Fatalf("got %d choices, usage %+v: want 3 choices of %d tokens", len(res.Choices), res.Usage, n)
	}
	for _, c := range res.Choices {
		if c.Text == "" || !strings.HasPrefix(ref.GreedyText, c.Text) {
			t.Errorf("choice %d: greedy text %q is not a prefix of llama.cpp's %q", c.Index, c.Text, ref.GreedyText)
		}
	}

	msgs := []map[string]any{{"role": "user", "content": "Tell me about the park."}}
	var chat chatResult
	e.PostJSON("/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 12, "temperature": 0, "n": 2}, http.StatusOK, &chat)
	if len(chat.Choices) != 2 || chat.Usage.PromptTokens == 0 || chat.Usage.CompletionTokens == 0 {
		t.Fatalf("chat response %+v", chat)
	}
	a, b := chat.Choices[0].Message.Content, chat.Choices[1].Message.Content
	if a == "" || a != b {
		t.Errorf("chat choices %q and %q: want the same greedy text", a, b)
	}
	t.Logf("completion %q, chat %q", res.Choices[0].Text, a)
}
