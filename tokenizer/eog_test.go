package tokenizer

import "testing"

// TestFamilyEOG: the end-of-turn token of each family's vocabulary ends generation, as llama.cpp
// decides from the vocabulary (its list of EOG texts), so `run` and `serve` stop on it.
func TestFamilyEOG(t *testing.T) {
	for _, tc := range []struct {
		name, vocab, token string
	}{
		{"llama3", "vocab/ggml-vocab-llama3.gguf", "<|eot_id|>"},
		{"qwen", "vocab/ggml-vocab-qwen3.gguf", "<|im_end|>"},
		{"qwen-endoftext", "vocab/ggml-vocab-qwen3.gguf", "<|endoftext|>"},
		{"phi3", "vocab/ggml-vocab-phi-3.gguf", "<|end|>"},
		{"phi3-endoftext", "vocab/ggml-vocab-phi-3.gguf", "<|endoftext|>"},
		{"llama2", "vocab/ggml-vocab-llama-spm.gguf", "</s>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := loadShared(t, tc.vocab)
			id, ok := tk.TokenID(tc.token)
			if !ok {
				t.Fatalf("%s has no token %q", tc.vocab, tc.token)
			}
			if !tk.IsEOG(id) {
				t.Errorf("%q (id %d) does not end generation; EOG ids %v", tc.token, id, tk.EOG())
			}
		})
	}
}
