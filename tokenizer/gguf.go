package tokenizer

import (
	"fmt"
	"math"

	"ubatch/gguf"
)

// Metadata keys read by FromGGUF.
const (
	keyModel       = "tokenizer.ggml.model"
	keyPre         = "tokenizer.ggml.pre"
	keyTokens      = "tokenizer.ggml.tokens"
	keyScores      = "tokenizer.ggml.scores"
	keyTypes       = "tokenizer.ggml.token_type"
	keyMerges      = "tokenizer.ggml.merges"
	keyBOS         = "tokenizer.ggml.bos_token_id"
	keyEOS         = "tokenizer.ggml.eos_token_id"
	keyUNK         = "tokenizer.ggml.unknown_token_id"
	keyPAD         = "tokenizer.ggml.padding_token_id"
	keyEOT         = "tokenizer.ggml.eot_token_id"
	keyAddBOS      = "tokenizer.ggml.add_bos_token"
	keyAddEOS      = "tokenizer.ggml.add_eos_token"
	keyAddSpacePfx = "tokenizer.ggml.add_space_prefix"
	keyName        = "general.name"
)

// FromGGUF builds the tokenizer described by a GGUF file's metadata.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	v, err := VocabFromGGUF(f)
	if err != nil {
		return nil, err
	}
	return New(v)
}

// VocabFromGGUF reads the tokenizer metadata of f, filling what is absent with llama.cpp's
// defaults: SPM has BOS 1, EOS 2, UNK 0, adds BOS and a space prefix; BPE has BOS = EOS = 11
// (no BOS for glm4), no UNK, and adds BOS only for llama3-style pre-tokenizers. A default id
// outside the vocabulary becomes -1 (none); a stored id outside it is an error naming the key,
// except -1 and 0xFFFFFFFF, which converters write for "none" and which keep the default.
func VocabFromGGUF(f *gguf.File) (Vocab, error) {
	v := Vocab{BOS: -1, EOS: -1, UNK: -1, PAD: -1, EOT: -1}
	var ok bool
	if v.Model, ok = f.String(keyModel); !ok {
		return v, missingOrMistyped(f, keyModel, "a string")
	}
	if _, present := f.Value(keyPre); present {
		if v.Pre, ok = f.String(keyPre); !ok {
			return v, missingOrMistyped(f, keyPre, "a string")
		}
	}
	if v.Tokens, ok = f.Strings(keyTokens); !ok {
		return v, missingOrMistyped(f, keyTokens, "a string array")
	}
	if _, present := f.Value(keyScores); present {
		if v.Scores, ok = f.Float32s(keyScores); !ok {
			return v, missingOrMistyped(f, keyScores, "a numeric array")
		}
	}
	if _, present := f.Value(keyTypes); present {
		if v.Types, ok = f.Int32s(keyTypes); !ok {
			return v, missingOrMistyped(f, keyTypes, "an int32 array")
		}
	}
	v.Name, _ = f.String(keyName)

	switch v.Model {
	case "llama":
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddBOS, v.AddSpacePrefix = true, true
	case "gpt2":
		if v.Merges, ok = f.Strings(keyMerges); !ok {
			return v, missingOrMistyped(f, keyMerges, "a string array")
		}
		v.BOS, v.EOS = 11, 11
		if p, ok := preTokenizers[v.Pre]; ok {
			v.AddBOS = p.addBOS // the llama3 family adds BOS by default
			if p.noBOS {
				v.BOS = -1
			}
		}
	default:
		return v, fmt.Errorf("tokenizer: unsupported %s %q (want \"llama\" or \"gpt2\")", keyModel, v.Model)
	}

	n := int64(len(v.Tokens))
	for _, sp := range []struct {
		key string
		id  *int32
	}{{keyBOS, &v.BOS}, {keyEOS, &v.EOS}, {keyUNK, &v.UNK}, {keyPAD, &v.PAD}, {keyEOT, &v.EOT}} {
		if int64(*sp.id) >= n {
			*sp.id = -1
		}
		if err := specialID(f, sp.key, n, sp.id); err != nil {
			return v, err
		}
	}
	fim, err := fimFromGGUF(f, n)
	if err != nil {
		return v, err
	}
	v.FIM = fim
	for _, b := range []struct {
		key string
		val *bool
	}{{keyAddBOS, &v.AddBOS}, {keyAddEOS, &v.AddEOS}, {keyAddSpacePfx, &v.AddSpacePrefix}} {
		if x, ok := f.Bool(b.key); ok {
			*b.val = x
		}
	}
	return v, nil
}

// specialID sets *id from the special-token key when the file has it: an integer in [0, n), or
// -1 / 0xFFFFFFFF ("none", leaving *id unchanged). Anything else is an error: the metadata does
// not agree with the vocabulary, and a wrong end-of-generation id would go unnoticed until
// generation never stops.
func specialID(f *gguf.File, key string, n int64, id *int32) error {
	val, present := f.Value(key)
	if !present {
		return nil
	}
	i, ok := f.Int(key)
	switch {
	case !ok:
		if u, isUint := f.Uint(key); isUint && u == math.MaxUint64 {
			return nil // uint64 "none"
		}
		return fmt.Errorf("tokenizer: metadata key %s is %T %v, want a token id", key, val, val)
	case i == -1 || i == math.MaxUint32:
		return nil
	case i < 0 || i >= n:
		return fmt.Errorf("tokenizer: metadata key %s = %d is outside the vocabulary of %d tokens (the file's metadata is inconsistent: re-convert the model or fix the key)", key, i, n)
	}
	*id = int32(i)
	return nil
}

func missingOrMistyped(f *gguf.File, key, want string) error {
	val, ok := f.Value(key)
	if !ok {
		return fmt.Errorf("tokenizer: metadata key %s is missing", key)
	}
	return fmt.Errorf("tokenizer: metadata key %s is %T, want %s", key, val, want)
}
