package tokenizer

import (
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"ubatch/internal/testdata"
)

// TestMaxTokenBytes checks the bound the server's prompt check relies on: no token of an
// encoding stands for more input bytes than MaxTokenBytes, on every shared vocabulary and on
// texts of the kinds that pack the most bytes into a token (long runs of one character,
// whitespace, words the vocabulary holds whole, special-token text, invalid UTF-8), and on the
// vocabularies' own test inputs.
func TestMaxTokenBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 2))
	random := func(alphabet []string, n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	texts := []struct {
		name string
		text string
	}{
		{name: "spaces", text: strings.Repeat(" ", 5000)},
		{name: "newlines", text: strings.Repeat("\n", 3000)},
		{name: "ab ", text: strings.Repeat("ab ", 3000)},
		{name: "one letter", text: strings.Repeat("a", 4000)},
		{name: "dashes", text: strings.Repeat("-", 4000)},
		{name: "words", text: random([]string{"the ", "and ", "Hello", " world", "function", "\t", "  ", "é", "中文", "🙂"}, 2000)},
		{name: "invalid UTF-8", text: random([]string{"\xff", "\xc3", "a", " ", "\x80"}, 2000)},
		{name: "special-token text", text: random([]string{"<s>", "</s>", "<|endoftext|>", "<|im_start|>", "<|eot_id|>", " x"}, 500)},
	}
	for _, name := range []string{"stories260K.gguf", "vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-llama3.gguf",
		"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-qwen3.gguf", "vocab/ggml-vocab-phi-3.gguf",
		"vocab/ggml-vocab-deepseek-coder.gguf", "vocab/ggml-vocab-falcon.gguf", "vocab/ggml-vocab-starcoder.gguf"} {
		t.Run(name, func(t *testing.T) {
			tk := loadShared(t, name)
			m := tk.MaxTokenBytes()
			cases := texts
			if inp, err := os.ReadFile(testdata.Model(t, name) + ".inp"); err == nil {
				cases = append(cases, struct{ name, text string }{name: "test inputs", text: string(inp)})
			}
			for _, c := range cases {
				for _, parse := range []bool{false, true} {
					n := len(tk.Encode(c.text, false, parse))
					// The SentencePiece space prefix adds one byte the input did not have.
					if len(c.text) > n*m+1 {
						t.Errorf("%s (parse special %v): %d bytes in %d tokens, over %d bytes a token", c.name, parse, len(c.text), n, m)
					}
				}
			}
		})
	}
}
