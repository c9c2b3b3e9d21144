package tokenizer

import (
	"fmt"
	"slices"

	"ubatch/gguf"
)

// FIMTokens are a vocabulary's fill-in-the-middle tokens (llama-server's /infill builds its
// prompt from them); an id is -1 when the vocabulary has no such token.
type FIMTokens struct {
	Pre, Suf, Mid int32 // before the prefix, before the suffix, before the middle to generate
	Pad           int32
	Rep, Sep      int32 // repository name and file separator of the repo-level format
}

// HasInfill reports whether the three tokens a fill-in-the-middle prompt needs are present.
func (f FIMTokens) HasInfill() bool { return f.Pre >= 0 && f.Suf >= 0 && f.Mid >= 0 }

func noFIM() FIMTokens { return FIMTokens{-1, -1, -1, -1, -1, -1} }

// FIM returns the vocabulary's fill-in-the-middle tokens.
func (t *Tokenizer) FIM() FIMTokens { return t.fim }

// fimTexts are the token texts llama.cpp takes as each FIM token when the metadata names none,
// in its order: Qwen, StarCoder-style, Granite, DeepSeek, CodeLlama, GLM-4.5, Falcon-H1.
var fimTexts = struct{ pre, suf, mid, pad, rep, sep []string }{
	pre: []string{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"},
	suf: []string{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"},
	mid: []string{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"},
	pad: []string{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"},
	rep: []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
	sep: []string{"<|file_sep|>"},
}

// The FIM metadata keys, and the deprecated names of the first three that older files carry.
var fimKeys = [...]struct{ key, old string }{
	{"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
	{"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
	{"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
	{"tokenizer.ggml.fim_pad_token_id", ""},
	{"tokenizer.ggml.fim_rep_token_id", ""},
	{"tokenizer.ggml.fim_sep_token_id", ""},
}

func (f *FIMTokens) ids() [6]*int32 { return [6]*int32{&f.Pre, &f.Suf, &f.Mid, &f.Pad, &f.Rep, &f.Sep} }

// fimFromGGUF reads the FIM keys of f (n tokens); a deprecated key is read when its new name is
// absent. An id outside the vocabulary is an error naming the key, as for the other specials.
func fimFromGGUF(f *gguf.File, n int64) (*FIMTokens, error) {
	fim := noFIM()
	for i, id := range fim.ids() {
		for _, key := range []string{fimKeys[i].key, fimKeys[i].old} {
			if key == "" || *id >= 0 {
				continue
			}
			if err := specialID(f, key, n, id); err != nil {
				return nil, err
			}
		}
	}
	return &fim, nil
}

// checkFIM is New's range check of the ids a Vocab names.
func checkFIM(f *FIMTokens, n int) error {
	if f == nil {
		return nil
	}
	for i, id := range f.ids() {
		if *id < -1 || *id >= int32(n) {
			return fmt.Errorf("tokenizer: %s %d out of range [-1, %d)", fimKeys[i].key, *id, n)
		}
	}
	return nil
}

// findFIM sets t.fim from the metadata's ids and, for those it does not name, from the token
// texts llama.cpp recognises (which it then treats as control tokens, as llama.cpp does). The
// pad, repository and file-separator tokens end generation, as in llama.cpp: a model filling a
// middle that writes one has moved on to another file. It runs before buildSpecials, so that
// the tokens it marks are split out of text.
func (t *Tokenizer) findFIM(meta *FIMTokens) {
	t.fim = noFIM()
	if meta != nil {
		t.fim = *meta
	}
	texts := [6][]string{fimTexts.pre, fimTexts.suf, fimTexts.mid, fimTexts.pad, fimTexts.rep, fimTexts.sep}
	for i, id := range t.fim.ids() {
		if *id >= 0 {
			continue
		}
		for _, s := range texts[i] {
			if found, ok := t.ids[s]; ok {
				*id = found
				t.attrs[found] |= attrControl
				break
			}
		}
	}
	for _, id := range []int32{t.fim.Pad, t.fim.Rep, t.fim.Sep} {
		if id >= 0 && !slices.Contains(t.eog, id) {
			t.eog = append(t.eog, id)
		}
	}
	slices.Sort(t.eog)
}
