package tokenizer

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"ubatch/gguf"
)

// kv is one metadata entry for metaGGUF.
type kv struct {
	key string
	val any // string, bool, uint32, int32, float32, []string, []float32, []int32
}

// metaGGUF encodes a GGUF v3 image holding only metadata (no tensors), for tests that need
// specific or broken tokenizer metadata.
func metaGGUF(t *testing.T, kvs []kv) *gguf.File {
	t.Helper()
	le := binary.LittleEndian
	b := []byte("GGUF")
	b = le.AppendUint32(b, 3)
	b = le.AppendUint64(b, 0) // tensors
	b = le.AppendUint64(b, uint64(len(kvs)))
	str := func(b []byte, s string) []byte { return append(le.AppendUint64(b, uint64(len(s))), s...) }
	for _, e := range kvs {
		b = str(b, e.key)
		switch v := e.val.(type) {
		case string:
			b = str(le.AppendUint32(b, 8), v)
		case bool:
			b = le.AppendUint32(b, 7)
			if v {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		case uint32:
			b = le.AppendUint32(le.AppendUint32(b, 4), v)
		case int32:
			b = le.AppendUint32(le.AppendUint32(b, 5), uint32(v))
		case float32:
			b = le.AppendUint32(le.AppendUint32(b, 6), math.Float32bits(v))
		case []string:
			b = le.AppendUint64(le.AppendUint32(le.AppendUint32(b, 9), 8), uint64(len(v)))
			for _, s := range v {
				b = str(b, s)
			}
		case []float32:
			b = le.AppendUint64(le.AppendUint32(le.AppendUint32(b, 9), 6), uint64(len(v)))
			for _, x := range v {
				b = le.AppendUint32(b, math.Float32bits(x))
			}
		case []int32:
			b = le.AppendUint64(le.AppendUint32(le.AppendUint32(b, 9), 5), uint64(len(v)))
			for _, x := range v {
				b = le.AppendUint32(b, uint32(x))
			}
		default:
			t.Fatalf("metaGGUF: unsupported value %T", v)
		}
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatalf("metaGGUF: %v", err)
	}
	return f
}

// with returns a copy of kvs plus extra entries.
func with(kvs []kv, extra ...kv) []kv { return append(append([]kv{}, kvs...), extra...) }

// without returns kvs minus the entry for key, or with it replaced when val is non-nil.
func without(kvs []kv, key string, val any) []kv {
	var out []kv
	for _, e := range kvs {
		if e.key == key {
			if val != nil {
				out = append(out, kv{key, val})
			}
			continue
		}
		out = append(out, e)
	}
	return out
}

func TestFromGGUF(t *testing.T) {
	spm := []kv{
		{"general.name", "tiny"},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", []string{"<unk>", "<s>", "</s>", "▁a", "<0x0A>"}},
		{"tokenizer.ggml.scores", []float32{0, 0, 0, -1, 0}},
		{"tokenizer.ggml.token_type", []int32{2, 3, 3, 1, 6}},
	}
	bpe := []kv{
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", "llama-bpe"},
		{"tokenizer.ggml.tokens", []string{"a", "b", "ab", "Ġ", "Ġab", "<|eot_id|>", "x", "y", "z", "w", "v", "<|end_of_text|>"}},
		{"tokenizer.ggml.token_type", []int32{1, 1, 1, 1, 1, 3, 1, 1, 1, 1, 1, 3}},
		{"tokenizer.ggml.merges", []string{"a b", "Ġ ab"}},
		{"tokenizer.ggml.eos_token_id", uint32(11)},
	}
	tests := []struct {
		name    string
		kvs     []kv
		wantErr string // "" means success
		check   func(t *testing.T, tk *Tokenizer)
	}{
		{"spm defaults", spm, "", func(t *testing.T, tk *Tokenizer) {
			if tk.BOS() != 1 || tk.EOS() != 2 || !tk.AddBOS() || tk.AddEOS() {
				t.Errorf("BOS %d EOS %d AddBOS %v AddEOS %v", tk.BOS(), tk.EOS(), tk.AddBOS(), tk.AddEOS())
			}
			if got := tk.Encode("a\n a", true, false); !equal(got, 1, 3, 4, 3) {
				t.Errorf("Encode = %v", got)
			}
		}},
		{"spm ids and flags from metadata", append(append([]kv{}, spm...),
			kv{"tokenizer.ggml.bos_token_id", uint32(2)}, kv{"tokenizer.ggml.add_bos_token", false},
			kv{"tokenizer.ggml.add_space_prefix", false}, kv{"tokenizer.ggml.padding_token_id", uint32(0xFFFFFFFF)}),
			"", func(t *testing.T, tk *Tokenizer) {
				if tk.BOS() != 2 || tk.AddBOS() {
					t.Errorf("BOS %d AddBOS %v", tk.BOS(), tk.AddBOS())
				}
				if got := tk.Encode(" a", true, false); !equal(got, 3) {
					t.Errorf("Encode = %v, want [3] (no BOS, no extra space prefix)", got)
				}
				if got := tk.Encode("a", false, false); !equal(got, 0) {
					t.Errorf("Encode = %v, want [0] (UNK: no byte token for 'a')", got)
				}
			}},
		{"spm without scores or types", without(without(spm, "tokenizer.ggml.scores", nil), "tokenizer.ggml.token_type", nil), "", nil},
		{"bpe llama3 defaults", bpe, "", func(t *testing.T, tk *Tokenizer) {
			// BOS falls back to llama.cpp's gpt2 default, 11, which exists here
			if tk.BOS() != 11 || !tk.AddBOS() || tk.EOT() != 5 || !tk.IsEOG(5) || !tk.IsEOG(11) {
				t.Errorf("BOS %d AddBOS %v EOT %d", tk.BOS(), tk.AddBOS(), tk.EOT())
			}
			if got := tk.Encode(" ab", false, false); !equal(got, 4) {
				t.Errorf("Encode = %v", got)
			}
		}},
		{"bpe default pre", without(bpe, "tokenizer.ggml.pre", nil), "", func(t *testing.T, tk *Tokenizer) {
			if tk.AddBOS() {
				t.Error("default pre-tokenizer must not add BOS")
			}
			// Ġ a b -> Ġ ab (rank 0) -> Ġab (rank 1)
			if got := tk.Encode(" ab", false, false); !equal(got, 4) {
				t.Errorf("Encode = %v", got)
			}
			if got := tk.Encode("ba", false, false); !equal(got, 1, 0) {
				t.Errorf("Encode = %v", got)
			}
		}},
		{"tokens missing", without(spm, "tokenizer.ggml.tokens", nil), "tokenizer.ggml.tokens is missing", nil},
		{"tokens wrong type", without(spm, "tokenizer.ggml.tokens", uint32(3)), "tokenizer.ggml.tokens is uint32, want a string array", nil},
		{"tokens empty", without(spm, "tokenizer.ggml.tokens", []string{}), "no tokens", nil},
		{"model missing", without(spm, "tokenizer.ggml.model", nil), "tokenizer.ggml.model is missing", nil},
		{"model unknown", without(spm, "tokenizer.ggml.model", "bert"), `unsupported tokenizer.ggml.model "bert"`, nil},
		{"merges missing", without(bpe, "tokenizer.ggml.merges", nil), "tokenizer.ggml.merges is missing", nil},
		{"merges malformed", without(bpe, "tokenizer.ggml.merges", []string{"ab"}), `merge 0 "ab" has no space`, nil},
		{"pre unknown", without(bpe, "tokenizer.ggml.pre", "klingon"), `unknown or unsupported BPE pre-tokenizer "klingon"`, nil},
		{"scores short", without(spm, "tokenizer.ggml.scores", []float32{1}), "1 scores for 5 tokens", nil},
		{"scores wrong type", without(spm, "tokenizer.ggml.scores", "x"), "tokenizer.ggml.scores is string", nil},
		{"types short", without(spm, "tokenizer.ggml.token_type", []int32{1, 1}), "2 token types for 5 tokens", nil},
		{"duplicate token", without(spm, "tokenizer.ggml.tokens", []string{"<unk>", "<s>", "</s>", "▁a", "▁a"}), `duplicate token "▁a"`, nil},
		{"add_bos without bos", without(without(without(bpe, "tokenizer.ggml.tokens", []string{"a", "b", "ab", "Ġ", "Ġab"}),
			"tokenizer.ggml.token_type", []int32{1, 1, 1, 1, 1}), "tokenizer.ggml.eos_token_id", nil),
			"AddBOS is set but the vocabulary has no BOS", nil},
		{"eos outside vocabulary", with(spm, kv{"tokenizer.ggml.eos_token_id", uint32(999999)}),
			"tokenizer.ggml.eos_token_id = 999999 is outside the vocabulary of 5 tokens", nil},
		{"bos just past vocabulary", with(spm, kv{"tokenizer.ggml.bos_token_id", uint32(5)}),
			"tokenizer.ggml.bos_token_id = 5 is outside the vocabulary", nil},
		{"unk negative", with(spm, kv{"tokenizer.ggml.unknown_token_id", int32(-7)}),
			"tokenizer.ggml.unknown_token_id = -7 is outside the vocabulary", nil},
		{"eot a string", with(spm, kv{"tokenizer.ggml.eot_token_id", "3"}),
			"tokenizer.ggml.eot_token_id is string 3, want a token id", nil},
		{"none as -1 keeps the default", with(spm, kv{"tokenizer.ggml.bos_token_id", int32(-1)}), "", func(t *testing.T, tk *Tokenizer) {
			if tk.BOS() != 1 {
				t.Errorf("BOS %d, want the SPM default 1", tk.BOS())
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := metaGGUF(t, tc.kvs)
			tk, err := FromGGUF(f)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, tk)
			}
		})
	}
}

func equal(got []int32, want ...int32) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func TestNewErrors(t *testing.T) {
	base := func() Vocab {
		return Vocab{Model: "llama", Tokens: []string{"<unk>", "<s>", "</s>"}, BOS: 1, EOS: 2, UNK: 0, PAD: -1, EOT: -1}
	}
	tests := []struct {
		name    string
		edit    func(v *Vocab)
		wantErr string
	}{
		{"ok", func(v *Vocab) {}, ""},
		{"no tokens", func(v *Vocab) { v.Tokens = nil }, "no tokens"},
		{"no model", func(v *Vocab) { v.Model = "" }, "model type is missing"},
		{"bad model", func(v *Vocab) { v.Model = "t5" }, `unsupported vocabulary model type "t5"`},
		{"bos out of range", func(v *Vocab) { v.BOS = 3 }, "BOS id 3 out of range"},
		{"eot negative", func(v *Vocab) { v.EOT = -2 }, "EOT id -2 out of range"},
		{"add eos without eos", func(v *Vocab) { v.EOS, v.AddEOS = -1, true }, "AddEOS is set"},
		{"gpt2 without merges", func(v *Vocab) { v.Model, v.Pre = "gpt2", "gpt-2" }, "no merges"},
		{"empty token renamed", func(v *Vocab) { v.Tokens = append(v.Tokens, "") }, ""},
		{"empty token clashes", func(v *Vocab) { v.Tokens = append(v.Tokens, "[EMPTY_4]", "") }, "duplicate token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := base()
			tc.edit(&v)
			_, err := New(v)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}
