package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestSynthFIMRerank: synth --fim --rerank writes the FIM keys, the rank metadata and head
// (ubatch info lists them); serve --rerank (or
// --reranking) refuses a model that is not a reranker at start.
func TestSynthFIMRerank(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "rr.gguf")
	if code, _, errs := ubatch(t, "synth", "--arch", "qwen3", "--shape", "mini", "--vocab", "builtin", "--fim", "--rerank", "-o", out); code != 0 {
		t.Fatalf("synth: exit %d: %s", code, errs)
	}
	code, stdout, errs := ubatch(t, "info", "-m", out, "--tensors")
	if code != 0 {
		t.Fatalf("info: exit %d: %s", code, errs)
	}
	for _, want := range []string{"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_sep_token_id", "qwen3.pooling_type", "cls.output.weight", "tokenizer.chat_template.rerank"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("info output lacks %q", want)
		}
	}
	plain := filepath.Join(dir, "plain.gguf")
	if code, _, errs := ubatch(t, "synth", "--arch", "qwen3", "--shape", "mini", "--vocab", "builtin", "-o", plain); code != 0 {
		t.Fatalf("synth: exit %d: %s", code, errs)
	}
	for _, flag := range []string{"--rerank", "--reranking"} { // llama-server's two spellings
		code, _, errs = ubatch(t, "serve", "-m", plain, flag, "--port", "0", "-c", "256")
		if code == 0 || !strings.Contains(errs, "--rerank") || !strings.Contains(errs, "not a reranker") {
			t.Errorf("serve %s over a plain model: exit %d: %s", flag, code, errs)
		}
	}
}
