package tokenizer

import (
	"slices"
	"testing"
)

// TestEncodeContinuation: the rest of a text after a part whose tokens are known tokenizes
// without SentencePiece's space prefix at its start, so that where no token spans the seam the
// whole text's tokens are the part's followed by the rest's; BPE has no prefix to drop.
func TestEncodeContinuation(t *testing.T) {
	tests := []struct {
		name, vocab, head, rest string
		seam                    bool // Encode(head+rest) == Encode(head) + EncodeContinuation(rest)
	}{
		{name: "spm after a word", vocab: "vocab/ggml-vocab-llama-spm.gguf", head: "Hello there", rest: " my friend", seam: true},
		{name: "spm after a newline", vocab: "vocab/ggml-vocab-llama-spm.gguf", head: "A cat.\n", rest: "[INST] more", seam: true},
		{name: "spm inside a word", vocab: "vocab/ggml-vocab-llama-spm.gguf", head: "Hel", rest: "lo there"},
		{name: "bpe after a special token", vocab: "vocab/ggml-vocab-qwen3.gguf", head: "<|im_start|>assistant\nHi there", rest: "<|im_end|>\n<|im_start|>user\nmore", seam: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tk := loadShared(t, tc.vocab)
			whole := tk.Encode(tc.head+tc.rest, false, true)
			joined := append(tk.Encode(tc.head, false, true), tk.EncodeContinuation(tc.rest)...)
			if got := slices.Equal(whole, joined); got != tc.seam {
				t.Fatalf("whole %v, head + rest %v: equal %v, want %v", whole, joined, got, tc.seam)
			}
			if tc.rest[0] != ' ' && tk.spm && slices.Equal(tk.EncodeContinuation(tc.rest), tk.Encode(tc.rest, false, true)) {
				t.Fatalf("EncodeContinuation(%q) kept the space prefix: %v", tc.rest, tk.EncodeContinuation(tc.rest))
			}
		})
	}
}
