package synth

import (
	"bytes"
	"fmt"

	"ubatch/gguf"
)

// BuiltinVocab returns a SentencePiece vocabulary of size tokens (at least 261) as a metadata-only
// GGUF, for models that need no real tokenizer (tests, fixtures): <unk>, <s>, </s>, the 256 byte
// tokens <0x00>..<0xFF>, "▁", then "▁a", "▁b", ... "▁z", "▁aa", ... with decreasing scores, so that any
// text encodes (by byte fallback where no piece matches).
func BuiltinVocab(size int) (*gguf.File, error) { return builtinVocab(size, nil) }

// builtinVocab is BuiltinVocab whose last tokens are the control tokens extra.
func builtinVocab(size int, extra []string) (*gguf.File, error) {
	if size < 261+len(extra) || size > 1<<20 {
		return nil, fmt.Errorf("builtin vocabulary of %d tokens: want %d to %d", size, 261+len(extra), 1<<20)
	}
	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{2, 3, 3}
	for b := range 256 {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, 6)
	}
	tokens = append(tokens, "▁") // a space before a character no piece starts with
	types = append(types, 1)
	for i := 0; len(tokens) < size-len(extra); i++ {
		tokens = append(tokens, "▁"+letters(i))
		types = append(types, 1)
	}
	for _, s := range extra {
		tokens = append(tokens, s)
		types = append(types, 3)
	}
	scores := make([]float32, size)
	for i := 259; i < size; i++ {
		scores[i] = -float32(i - 259)
	}
	w := gguf.NewWriter()
	for _, kv := range []gguf.KV{
		{Key: "general.name", Value: "ubatch-builtin-vocab"},
		{Key: "tokenizer.ggml.model", Value: "llama"},
		{Key: "tokenizer.ggml.tokens", Value: tokens},
		{Key: "tokenizer.ggml.scores", Value: scores},
		{Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.bos_token_id", Value: uint32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Value: uint32(2)},
		{Key: "tokenizer.ggml.unknown_token_id", Value: uint32(0)},
		{Key: "tokenizer.ggml.add_bos_token", Value: true},
		{Key: "tokenizer.ggml.add_eos_token", Value: false},
		{Key: "tokenizer.ggml.pre", Value: "default"},
	} {
		if err := w.Set(kv.Key, kv.Value); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, err
	}
	return gguf.Parse(buf.Bytes())
}

// letters is i in bijective base 26: a, b, ..., z, aa, ab, ...
func letters(i int) string {
	var b []byte
	for i++; i > 0; i = (i - 1) / 26 {
		b = append([]byte{byte('a' + (i-1)%26)}, b...)
	}
	return string(b)
}

// Fixture builds a model of the family arch at the mini shape with a 320-token BuiltinVocab,
// seed 1: a few hundred KB, for tests that need a model of each family without ../shared.
func Fixture(arch, fileType string) (*gguf.Writer, error) {
	v, err := BuiltinVocab(320)
	if err != nil {
		return nil, err
	}
	s, err := ShapeByName("mini")
	if err != nil {
		return nil, err
	}
	return Build(Options{Arch: arch, Shape: s, FileType: fileType, Vocab: v, Seed: 1, Threads: 1})
}
