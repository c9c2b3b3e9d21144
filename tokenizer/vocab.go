// Package tokenizer turns text into token ids and back for the two vocabulary kinds GGUF models
// carry: SentencePiece ("llama": score-driven bigram merges with <0xNN> byte fallback) and
// byte-level BPE ("gpt2": a regex-like pre-tokenizer, GPT-2's byte-to-unicode mapping and
// rank-ordered merges). Its results match llama.cpp's tokenizer token for token.
package tokenizer

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Token types as stored in tokenizer.ggml.token_type.
const (
	TypeUndefined   = 0
	TypeNormal      = 1
	TypeUnknown     = 2
	TypeControl     = 3
	TypeUserDefined = 4
	TypeUnused      = 5
	TypeByte        = 6
)

// attr is a bit set of token attributes, derived from the token type and adjusted by the same
// heuristics llama.cpp applies (EOG-looking tokens become control tokens, Phi-3 strips spaces
// after special tokens, ...).
type attr uint16

const (
	attrUnknown attr = 1 << iota
	attrUnused
	attrNormal
	attrControl
	attrUserDefined
	attrByte
	attrLStrip // whitespace before the token is dropped when it is split out of text
	attrRStrip // whitespace after the token is dropped when it is split out of text
)

// Vocab is the tokenizer description held in GGUF metadata. Special token ids are -1 when absent.
type Vocab struct {
	Model  string    // "llama" (SentencePiece) or "gpt2" (byte-level BPE)
	Pre    string    // BPE pre-tokenizer name ("default", "gpt-2", "llama-bpe", "qwen2", ...); ignored for SPM
	Tokens []string  // token texts, indexed by id
	Scores []float32 // SPM merge scores; nil means all zero; otherwise at least len(Tokens) long
	Types  []int32   // token types (Type* constants); nil means all normal; otherwise at least len(Tokens) long
	Merges []string  // BPE merges "left right", highest priority first; required for gpt2

	BOS, EOS, UNK, PAD, EOT int32

	AddBOS, AddEOS, AddSpacePrefix bool

	// FIM are the fill-in-the-middle ids the metadata names (-1: not named); nil names none.
	// Those not named are found by their text (see Tokenizer.FIM).
	FIM *FIMTokens

	// Name is general.name. llama.cpp keys a few per-model token attributes on it (Phi-3 drops
	// whitespace after special tokens); it may be empty.
	Name string
}

// Tokenizer encodes and decodes text for one vocabulary. It is immutable after New and safe for
// concurrent use.
type Tokenizer struct {
	spm bool
	pre preTokenizer // BPE only

	tokens []string
	scores []float32
	attrs  []attr
	ids    map[string]int32
	ranks  map[mergePair]int32 // BPE merge ranks

	bos, eos, unk, pad, eot int32
	addBOS, addEOS, addSP   bool

	specials []int32 // control, user-defined and unknown tokens, longest text first
	eog      []int32 // end-of-generation tokens
	fim      FIMTokens
	byteTok  [256]int32

	maxText int // the longest token text in bytes (MaxTokenBytes)

	pieceBuf []byte  // Piece texts of all tokens, concatenated
	pieceOff []int32 // Piece(id) = pieceBuf[pieceOff[id]:pieceOff[id+1]]

	scratch sync.Pool // *scratch reused across Encode calls
}

type mergePair struct{ left, right string }

// New builds a tokenizer from a vocabulary. Token ids must be -1 or in range, token texts unique,
// and a gpt2 vocabulary needs merges and a known pre-tokenizer.
func New(v Vocab) (*Tokenizer, error) {
	n := len(v.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("tokenizer: vocabulary has no tokens")
	}
	if int64(n) > 1<<31-1 {
		return nil, fmt.Errorf("tokenizer: %d tokens do not fit an int32 id", n)
	}
	if v.Scores != nil && len(v.Scores) < n {
		return nil, fmt.Errorf("tokenizer: %d scores for %d tokens", len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) < n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(v.Types), n)
	}
	t := &Tokenizer{
		tokens: make([]string, n),
		scores: make([]float32, n),
		attrs:  make([]attr, n),
		ids:    make(map[string]int32, n),
		bos:    v.BOS, eos: v.EOS, unk: v.UNK, pad: v.PAD, eot: v.EOT,
		addBOS: v.AddBOS, addEOS: v.AddEOS, addSP: v.AddSpacePrefix,
	}
	switch v.Model {
	case "llama":
		t.spm = true
	case "gpt2":
		pre, ok := preTokenizers[v.Pre]
		if !ok {
			return nil, fmt.Errorf("tokenizer: unknown or unsupported BPE pre-tokenizer %q", v.Pre)
		}
		t.pre = pre
		if len(v.Merges) == 0 {
			return nil, fmt.Errorf("tokenizer: gpt2 vocabulary has no merges")
		}
	case "":
		return nil, fmt.Errorf("tokenizer: vocabulary model type is missing")
	default:
		return nil, fmt.Errorf("tokenizer: unsupported vocabulary model type %q (want \"llama\" or \"gpt2\")", v.Model)
	}

	for i, s := range v.Tokens {
		if s == "" {
			// llama.cpp renames empty tokens so that every text maps back to one id.
			s = fmt.Sprintf("[EMPTY_%d]", i)
		}
		if j, dup := t.ids[s]; dup {
			return nil, fmt.Errorf("tokenizer: duplicate token %q with ids %d and %d", s, j, i)
		}
		t.ids[s] = int32(i)
		t.tokens[i] = s
		t.maxText = max(t.maxText, len(s))
		if v.Scores != nil {
			t.scores[i] = v.Scores[i]
		}
		typ := int32(TypeNormal)
		if v.Types != nil {
			typ = v.Types[i]
		}
		t.attrs[i] = typeAttr(typ)
	}

	for _, sp := range []struct {
		name string
		id   int32
	}{{"BOS", v.BOS}, {"EOS", v.EOS}, {"UNK", v.UNK}, {"PAD", v.PAD}, {"EOT", v.EOT}} {
		if sp.id < -1 || sp.id >= int32(n) {
			return nil, fmt.Errorf("tokenizer: %s id %d out of range [-1, %d)", sp.name, sp.id, n)
		}
	}
	if err := checkFIM(v.FIM, n); err != nil {
		return nil, err
	}
	if v.AddBOS && v.BOS < 0 {
		return nil, fmt.Errorf("tokenizer: AddBOS is set but the vocabulary has no BOS token")
	}
	if v.AddEOS && v.EOS < 0 {
		return nil, fmt.Errorf("tokenizer: AddEOS is set but the vocabulary has no EOS token")
	}

	if !t.spm {
		ranks, err := mergeRanks(v.Merges)
		if err != nil {
			return nil, err
		}
		t.ranks = ranks
	}

	t.findEOG()
	t.findFIM(v.FIM)
	t.buildSpecials(strings.ToLower(v.Name))
	t.buildByteTokens()
	t.buildPieces()
	return t, nil
}

// mergeRanks maps each BPE merge ("left right") to its rank, the first of duplicates winning.
func mergeRanks(merges []string) (map[mergePair]int32, error) {
	ranks := make(map[mergePair]int32, len(merges))
	for i, m := range merges {
		// Split at the first space after the first byte, as llama.cpp does, so that a merge
		// whose left side is a literal space still parses.
		k := strings.IndexByte(m[min(1, len(m)):], ' ')
		if k < 0 {
			return nil, fmt.Errorf("tokenizer: merge %d %q has no space separator", i, m)
		}
		k += min(1, len(m))
		p := mergePair{m[:k], m[k+1:]}
		if _, dup := ranks[p]; !dup {
			ranks[p] = int32(i)
		}
	}
	return ranks, nil
}

func typeAttr(typ int32) attr {
	switch typ {
	case TypeNormal:
		return attrNormal
	case TypeUnknown:
		return attrUnknown
	case TypeControl:
		return attrControl
	case TypeUserDefined:
		return attrUserDefined
	case TypeUnused:
		return attrUnused
	case TypeByte:
		return attrByte
	}
	return 0
}

// eotTexts are texts llama.cpp takes as the end-of-turn token when the metadata names none, in
// order of preference.
var eotTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
	"<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
}

// eogTexts are texts of tokens that end generation (llama.cpp's list).
var eogTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
	"<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<｜end▁of▁sentence｜>", "[e~[",
	// fill-in-the-middle pad/repo/file-separator tokens also end generation
	"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
	"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
	"<|file_sep|>",
}

// findEOG fills eot (when unset) and eog, and marks the EOG tokens as control tokens, following
// llama.cpp's text-based detection.
func (t *Tokenizer) findEOG() {
	if t.eot < 0 {
		for _, s := range eotTexts {
			if id, ok := t.ids[s]; ok {
				t.eot = id
				break
			}
		}
	}
	seen := map[int32]bool{}
	add := func(id int32) {
		if id >= 0 && !seen[id] {
			seen[id] = true
			t.eog = append(t.eog, id)
		}
	}
	for _, s := range eogTexts {
		if id, ok := t.ids[s]; ok {
			add(id)
			t.attrs[id] |= attrControl
		}
	}
	add(t.eos)
	add(t.eot)
	if id, ok := t.ids["<|eom_id|>"]; ok {
		add(id)
	}
	// gpt-oss renders these tokens as text even though they are special.
	for _, s := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"} {
		if id, ok := t.ids[s]; ok {
			t.attrs[id] = attrUserDefined
		}
	}
	// Harmony-style vocabularies end a turn with <|return|>/<|call|>; there <|end|> is not EOG.
	has := func(s string) bool { id, ok := t.ids[s]; return ok && seen[id] }
	if has("<|end|>") && ((has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>"))) {
		t.dropEOG(t.ids["<|end|>"], attrUserDefined)
	}
	// Gemma 4 uses </s> as text when it has <|tool_response>.
	if has("</s>") && has("<|tool_response>") {
		t.dropEOG(t.ids["</s>"], attrNormal)
	}
	sort.Slice(t.eog, func(i, j int) bool { return t.eog[i] < t.eog[j] })
}

func (t *Tokenizer) dropEOG(id int32, a attr) {
	for i, e := range t.eog {
		if e == id {
			t.eog = append(t.eog[:i], t.eog[i+1:]...)
			break
		}
	}
	t.attrs[id] = a
}

// buildSpecials lists the tokens Encode splits out of text (longest first, so that a token is
// never pre-empted by one of its substrings) and applies name-keyed strip attributes.
func (t *Tokenizer) buildSpecials(name string) {
	for id, a := range t.attrs {
		if a&(attrControl|attrUserDefined|attrUnknown) != 0 {
			t.specials = append(t.specials, int32(id))
		}
	}
	sort.SliceStable(t.specials, func(i, j int) bool {
		return len(t.tokens[t.specials[i]]) > len(t.tokens[t.specials[j]])
	})
	if strings.Contains(name, "phi-3") || strings.Contains(name, "phi3") {
		for _, id := range t.specials {
			t.attrs[id] |= attrRStrip
		}
		if id, ok := t.ids["</s>"]; ok {
			t.attrs[id] |= attrRStrip
		}
		for _, s := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			if id, ok := t.ids[s]; ok {
				t.attrs[id] &^= attrRStrip
			}
		}
	}
}

// buildByteTokens maps each byte to the token that stands for it: <0xNN> for SPM (or the
// one-byte text), the byte's GPT-2 unicode character for BPE; -1 when the vocab has none.
func (t *Tokenizer) buildByteTokens() {
	const hex = "0123456789ABCDEF"
	for b := range 256 {
		t.byteTok[b] = -1
		var cands []string
		if t.spm {
			cands = []string{"<0x" + string(hex[b>>4]) + string(hex[b&15]) + ">", string([]byte{byte(b)})}
		} else {
			cands = []string{byteUnicode[b]}
		}
		for _, c := range cands {
			if id, ok := t.ids[c]; ok {
				t.byteTok[b] = id
				break
			}
		}
	}
}

// VocabSize returns the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// BOS returns the beginning-of-sequence token id, or -1.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS returns the end-of-sequence token id, or -1.
func (t *Tokenizer) EOS() int32 { return t.eos }

// EOT returns the end-of-turn token id, or -1.
func (t *Tokenizer) EOT() int32 { return t.eot }

// AddBOS reports whether Encode with addSpecial prepends BOS.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// AddEOS reports whether Encode with addSpecial appends EOS.
func (t *Tokenizer) AddEOS() bool { return t.addEOS }

// IsEOG reports whether id ends generation: EOS, EOT and end-of-turn tokens such as <|eot_id|>,
// <|im_end|> or <|end|>.
func (t *Tokenizer) IsEOG(id int32) bool {
	for _, e := range t.eog {
		if e == id {
			return true
		}
	}
	return false
}

// EOG returns the end-of-generation token ids in increasing order. The slice must not be modified.
func (t *Tokenizer) EOG() []int32 { return t.eog }

// TokenID returns the id of the token whose vocabulary text is exactly text.
func (t *Tokenizer) TokenID(text string) (int32, bool) {
	id, ok := t.ids[text]
	return id, ok
}

// Token returns the vocabulary text of id ("" when out of range).
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// MaxTokenBytes bounds the bytes of input text one token stands for: the longest token text of
// the vocabulary, and at least 4 (one UTF-8 character read as the unknown token). Every token
// text is at least as long as the input it covers (SentencePiece writes a space as the 3-byte
// "▁", byte-level BPE a byte as one or two characters, a byte token as "<0xNN>"), so a text
// longer than n·MaxTokenBytes() (plus a space prefix) cannot encode to n tokens or fewer. The one
// exception is ASCII whitespace that a special token with the LStrip or RStrip attribute
// swallows (BERT-style vocabularies' mask tokens), which no chat model's vocabulary has.
func (t *Tokenizer) MaxTokenBytes() int { return max(t.maxText, 4) }

// IsControl reports whether id is a control or unknown token, which decodes to no text.
func (t *Tokenizer) IsControl(id int32) bool {
	return id >= 0 && int(id) < len(t.attrs) && t.attrs[id]&(attrControl|attrUnknown) != 0
}
