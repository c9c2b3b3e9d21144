package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"ubatch/internal/testdata"
)

// addVectorSeeds adds every llama.cpp test string as a fuzz seed.
func addVectorSeeds(f *testing.F) {
	f.Helper()
	path := testdata.Model(f, "vocab/ggml-vocab-llama-spm.gguf")
	for _, c := range readVectors(f, path) {
		f.Add(c.text)
	}
	f.Add("\xff\xfe invalid \xc3")
	f.Add("<s></s><unk><|endoftext|>")
	f.Add(strings.Repeat("ab", 300))
}

// checkEncode checks the properties every input must have: ids in range, and the parsed and
// unparsed encodings succeed.
func checkEncode(t *testing.T, tk *Tokenizer, s string) []int32 {
	ids := tk.Encode(s, false, false)
	for _, id := range append(ids, tk.Encode(s, true, true)...) {
		if id < 0 || int(id) >= tk.VocabSize() {
			t.Fatalf("Encode(%q): id %d out of range", s, id)
		}
	}
	return ids
}

// FuzzEncodeSPM: Encode never panics, and since SentencePiece encoding is lossless (byte
// fallback covers any byte), Decode(Encode(s)) == s for valid UTF-8 without a literal "▁" (which
// decodes to a space). Invalid UTF-8 can fail: like llama.cpp, a stray lead byte swallows the
// escaped space after it into one bogus character, which then falls back to its raw bytes.
func FuzzEncodeSPM(f *testing.F) {
	addVectorSeeds(f)
	tk := loadShared(f, "vocab/ggml-vocab-llama-spm.gguf")
	f.Fuzz(func(t *testing.T, s string) {
		ids := checkEncode(t, tk, s)
		if !utf8.ValidString(s) || strings.Contains(s, spaceEscape) {
			return
		}
		if got := tk.Decode(ids); got != s {
			t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
		}
	})
}

// FuzzEncodeBPE: Encode never panics, and byte-level BPE round-trips every valid UTF-8 input
// (invalid bytes are read as U+FFFD) on the gpt-2, llama3 and qwen3 vocabularies.
func FuzzEncodeBPE(f *testing.F) {
	addVectorSeeds(f)
	var tks []*Tokenizer
	for _, name := range []string{"gpt-2", "llama3", "qwen3"} {
		tks = append(tks, loadShared(f, "vocab/ggml-vocab-"+name+".gguf"))
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tk := range tks {
			ids := checkEncode(t, tk, s)
			if !utf8.ValidString(s) {
				continue
			}
			if got := tk.Decode(ids); got != s {
				t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
			}
		}
	})
}
