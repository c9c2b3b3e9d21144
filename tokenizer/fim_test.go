package tokenizer

import (
	"strings"
	"testing"
)

// fimVocab is a small SentencePiece vocabulary whose last tokens are extra (FIM-looking) texts.
func fimVocab(extra ...string) []kv {
	toks := []string{"<unk>", "<s>", "</s>", "▁a", "▁b"}
	toks = append(toks, extra...)
	return []kv{{"tokenizer.ggml.model", "llama"}, {"tokenizer.ggml.tokens", toks}}
}

func fromMeta(t *testing.T, kvs []kv) (*Tokenizer, error) {
	t.Helper()
	return FromGGUF(metaGGUF(t, kvs))
}

// TestFIMByText: without FIM keys the tokens are found by their texts (Qwen's, StarCoder's,
// DeepSeek's), become control tokens (split out of text, decoded to nothing) and pad, repo and
// file separator end generation; a vocabulary without them has none.
func TestFIMByText(t *testing.T) {
	tk, err := fromMeta(t, fimVocab("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"))
	if err != nil {
		t.Fatal(err)
	}
	want := FIMTokens{Pre: 5, Suf: 6, Mid: 7, Pad: 8, Rep: 9, Sep: 10}
	if got := tk.FIM(); got != want || !got.HasInfill() {
		t.Fatalf("FIM = %+v, want %+v", got, want)
	}
	for _, id := range []int32{5, 6, 7} {
		if !tk.IsControl(id) || tk.IsEOG(id) {
			t.Errorf("token %d: control %v, EOG %v; want control, not EOG", id, tk.IsControl(id), tk.IsEOG(id))
		}
	}
	for _, id := range []int32{8, 9, 10} {
		if !tk.IsEOG(id) {
			t.Errorf("token %d is not EOG", id)
		}
	}
	if got := tk.Encode("a<|fim_middle|>", false, true); len(got) != 2 || got[1] != 7 {
		t.Errorf("Encode splits out <|fim_middle|>: got %v", got)
	}
	for _, set := range [][]string{{"<fim_prefix>", "<fim_suffix>", "<fim_middle>"}, {"<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"}} {
		tk, err := fromMeta(t, fimVocab(set...))
		if err != nil {
			t.Fatal(err)
		}
		if got := tk.FIM(); got.Pre != 5 || got.Suf != 6 || got.Mid != 7 || got.Pad != -1 {
			t.Errorf("%v: FIM = %+v", set, got)
		}
	}
	tk, err = fromMeta(t, fimVocab())
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.FIM(); got != noFIM() || got.HasInfill() {
		t.Errorf("no FIM tokens: FIM = %+v", got)
	}
}

// TestFIMKeys: the metadata's ids win over texts, a deprecated key is read when the new one is
// absent, a keyed file separator ends generation, and an id outside the vocabulary is an error
// naming the key.
func TestFIMKeys(t *testing.T) {
	kvs := with(fimVocab("<|fim_prefix|>", "x", "y", "z"),
		kv{"tokenizer.ggml.fim_pre_token_id", uint32(6)},
		kv{"tokenizer.ggml.suffix_token_id", uint32(7)},
		kv{"tokenizer.ggml.fim_mid_token_id", uint32(8)},
		kv{"tokenizer.ggml.fim_sep_token_id", uint32(4)})
	tk, err := fromMeta(t, kvs)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tk.FIM(), (FIMTokens{Pre: 6, Suf: 7, Mid: 8, Pad: -1, Rep: -1, Sep: 4}); got != want {
		t.Fatalf("FIM = %+v, want %+v", got, want)
	}
	if !tk.IsEOG(4) || tk.IsEOG(6) {
		t.Errorf("EOG: sep %v (want true), pre %v (want false)", tk.IsEOG(4), tk.IsEOG(6))
	}
	_, err = fromMeta(t, with(fimVocab(), kv{"tokenizer.ggml.fim_mid_token_id", uint32(99)}))
	if err == nil || !strings.Contains(err.Error(), "fim_mid_token_id") {
		t.Fatalf("out-of-range id: err %v", err)
	}
}

// TestFIMShared: the shared vocabularies of code models have their FIM tokens found as llama.cpp
// finds them.
func TestFIMShared(t *testing.T) {
	for _, tc := range []struct{ vocab, pre, mid, sep string }{
		{"qwen3", "<|fim_prefix|>", "<|fim_middle|>", "<|file_sep|>"},
		{"starcoder", "<fim_prefix>", "<fim_middle>", ""},
		{"deepseek-coder", "<｜fim▁begin｜>", "<｜fim▁end｜>", ""},
	} {
		t.Run(tc.vocab, func(t *testing.T) {
			tk := loadShared(t, "vocab/ggml-vocab-"+tc.vocab+".gguf")
			f := tk.FIM()
			if !f.HasInfill() || tk.Token(f.Pre) != tc.pre || tk.Token(f.Mid) != tc.mid {
				t.Fatalf("FIM %+v: pre %q mid %q", f, tk.Token(f.Pre), tk.Token(f.Mid))
			}
			if tc.sep != "" && tk.Token(f.Sep) != tc.sep {
				t.Errorf("sep %d %q, want %q", f.Sep, tk.Token(f.Sep), tc.sep)
			}
		})
	}
}
