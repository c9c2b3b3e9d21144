package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// tinySPM is a hand-made SentencePiece vocabulary: control tokens, all 256 byte tokens, and a few
// pieces whose scores decide the merge order.
func tinySPM(t *testing.T) *Tokenizer {
	t.Helper()
	v := Vocab{Model: "llama", BOS: 1, EOS: 2, UNK: 0, PAD: -1, EOT: -1, AddBOS: true, AddSpacePrefix: true}
	add := func(s string, score float32, typ int32) {
		v.Tokens = append(v.Tokens, s)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
	}
	add("<unk>", 0, TypeUnknown)
	add("<s>", 0, TypeControl)
	add("</s>", 0, TypeControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, TypeByte)
	}
	// ids from 259 on
	for _, p := range []struct {
		s     string
		score float32
	}{
		{"▁", -1}, {"a", -2}, {"b", -2}, {"c", -2}, {"ab", -5}, {"bc", -3}, {"▁a", -4}, {"abc", -1}, {"é", -2},
	} {
		add(p.s, p.score, TypeNormal)
	}
	tk, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestSPMMergeOrder(t *testing.T) {
	tk := tinySPM(t)
	id := func(s string) int32 {
		i, ok := tk.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	tests := []struct {
		name string
		text string
		want []int32
	}{
		{"empty", "", nil},
		// "▁abc": "bc" (-3) beats "▁a" (-4) and "ab" (-5); then "a"+"bc" = "abc" (-1) follows
		{"higher score first", "abc", []int32{id("▁"), id("abc")}},
		// "ab" (-5) beats nothing else: "▁a" (-4) merges first and leaves "b"
		{"left pair wins", "ab", []int32{id("▁a"), id("b")}},
		{"space escaped", "a b", []int32{id("▁a"), id("▁"), id("b")}},
		{"byte fallback", "a€", []int32{id("▁a"), id("<0xE2>"), id("<0x82>"), id("<0xAC>")}},
		{"known non-ASCII char", "é", []int32{id("▁"), id("é")}},
		{"invalid UTF-8 as bytes", "\xff", []int32{id("▁"), id("<0xFF>")}},
		{"truncated sequence", "\xe2\x82", []int32{id("▁"), id("<0xE2>"), id("<0x82>")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tk.Encode(tc.text, false, false)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
			}
			if dec := tk.Decode(got); dec != tc.text {
				t.Errorf("Decode = %q, want %q", dec, tc.text)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	samples := []string{
		"Hello world",
		" leading space",
		"  two leading spaces and trailing  ",
		"tabs\tand\nnewlines\r\n\n",
		"Ünïcödé: naïve café, Größe, Ærøskøbing",
		"Кириллица и 中文字符 и 日本語のテキスト 한국어",
		"emoji 🦙🚀👍🏽 and ZWJ 👨‍👩‍👧",
		"math ∑ x² ≤ ∞, arrows → ⇒",
		"code: func main() { fmt.Println(\"hi\") } // 12345678901234",
		"'s 're 'VE contractions I'm we'll",
		"<s> and <|eot_id|> as plain text",
	}
	vocabs := []string{"llama-spm", "phi-3", "gpt-2", "llama3", "qwen3", "starcoder", "falcon", "deepseek-coder"}
	for _, name := range vocabs {
		t.Run(name, func(t *testing.T) {
			tk := loadShared(t, "vocab/ggml-vocab-"+name+".gguf")
			for _, s := range samples {
				ids := tk.Encode(s, false, false)
				if got := tk.Decode(ids); got != s {
					t.Errorf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
				}
			}
		})
	}
}

func TestParseSpecial(t *testing.T) {
	tests := []struct {
		name    string
		vocab   string
		text    string
		special bool
		want    []string // expected token texts
	}{
		{"llama3 eot parsed", "llama3", "hi<|eot_id|>", true, []string{"hi", "<|eot_id|>"}},
		{"llama3 eot as text", "llama3", "hi<|eot_id|>", false, []string{"hi", "<", "|", "e", "ot", "_id", "|", ">"}},
		{"spm bos parsed, space prefix after it", "llama-spm", "<s>Hello</s>", true, []string{"<s>", "▁Hello", "</s>"}},
		{"spm bos as text", "llama-spm", "<s>", false, []string{"▁<", "s", ">"}},
		{"qwen user-defined always split", "qwen3", "a<think>b", false, []string{"a", "<think>", "b"}},
		{"qwen control only when parsing", "qwen3", "<|im_start|>user", true, []string{"<|im_start|>", "user"}},
		{"phi-3 strips spaces after special", "phi-3", "<|user|> \n hi", true, []string{"<|user|>", "▁hi"}},
		{"longest special wins", "llama3", "<|start_header_id|>", true, []string{"<|start_header_id|>"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tk := loadShared(t, "vocab/ggml-vocab-"+tc.vocab+".gguf")
			ids := tk.Encode(tc.text, false, tc.special)
			var got []string
			for _, id := range ids {
				got = append(got, tk.Token(id))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Encode(%q, parseSpecial=%v) = %q (%v), want %q", tc.text, tc.special, got, ids, tc.want)
			}
		})
	}
}

func TestAddSpecial(t *testing.T) {
	tests := []struct {
		name      string
		vocab     string
		wantFirst int32 // -1: no BOS expected
		wantLast  int32 // -1: no EOS expected
	}{
		{"spm adds BOS", "llama-spm", 1, -1},
		{"llama3 adds BOS", "llama3", 128000, -1},
		{"deepseek adds BOS", "deepseek-coder", 32013, -1},
		{"qwen3 adds nothing", "qwen3", -1, -1},
		{"gpt-2 adds nothing", "gpt-2", -1, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tk := loadShared(t, "vocab/ggml-vocab-"+tc.vocab+".gguf")
			plain := tk.Encode("Hello world", false, false)
			ids := tk.Encode("Hello world", true, false)
			want := plain
			if tc.wantFirst >= 0 {
				want = append([]int32{tc.wantFirst}, want...)
				if !tk.AddBOS() || tk.BOS() != tc.wantFirst {
					t.Errorf("AddBOS %v BOS %d", tk.AddBOS(), tk.BOS())
				}
			}
			if !slices.Equal(ids, want) {
				t.Fatalf("Encode with addSpecial = %v, want %v", ids, want)
			}
		})
	}
	t.Run("EOS appended", func(t *testing.T) {
		v := Vocab{Model: "llama", Tokens: []string{"<unk>", "<s>", "</s>", "▁a"}, Types: []int32{2, 3, 3, 1},
			BOS: 1, EOS: 2, UNK: 0, PAD: -1, EOT: -1, AddBOS: true, AddEOS: true, AddSpacePrefix: true}
		tk, err := New(v)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := tk.Encode("a", true, false), []int32{1, 3, 2}; !slices.Equal(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		if got := tk.Encode("", true, false); !slices.Equal(got, []int32{1, 2}) {
			t.Fatalf("empty text: got %v, want [1 2]", got)
		}
	})
}

func TestEOG(t *testing.T) {
	tests := []struct {
		vocab string
		eog   []string
		notEO []string
	}{
		{"llama3", []string{"<|eot_id|>", "<|end_of_text|>"}, []string{"<|begin_of_text|>", "<|start_header_id|>", "Hello"}},
		{"qwen3", []string{"<|im_end|>", "<|endoftext|>", "<|fim_pad|>", "<|file_sep|>"}, []string{"<|im_start|>", "<think>"}},
		{"phi-3", []string{"<|end|>", "<|endoftext|>"}, []string{"<|user|>", "<s>"}},
		{"llama-spm", []string{"</s>"}, []string{"<s>", "<unk>"}},
		{"gpt-2", []string{"<|endoftext|>"}, []string{"Hello"}},
	}
	for _, tc := range tests {
		t.Run(tc.vocab, func(t *testing.T) {
			tk := loadShared(t, "vocab/ggml-vocab-"+tc.vocab+".gguf")
			for _, s := range tc.eog {
				id, ok := tk.TokenID(s)
				if !ok || !tk.IsEOG(id) {
					t.Errorf("%q (id %d, found %v) not EOG", s, id, ok)
				}
			}
			for _, s := range tc.notEO {
				if id, ok := tk.TokenID(s); !ok || tk.IsEOG(id) {
					t.Errorf("%q (id %d, found %v) is EOG or missing", s, id, ok)
				}
			}
			if tk.IsEOG(-1) || tk.IsEOG(int32(tk.VocabSize())) {
				t.Error("out-of-range id reported as EOG")
			}
		})
	}
}

func TestPieceAndToken(t *testing.T) {
	spm := loadShared(t, "vocab/ggml-vocab-llama-spm.gguf")
	gpt := loadShared(t, "vocab/ggml-vocab-gpt-2.gguf")
	tests := []struct {
		name  string
		tk    *Tokenizer
		token string
		piece string
	}{
		{"spm normal", spm, "▁Hello", " Hello"},
		{"spm byte", spm, "<0x0A>", "\n"},
		{"spm control", spm, "<s>", ""},
		{"spm unknown", spm, "<unk>", ""},
		{"bpe space", gpt, "Ġworld", " world"},
		{"bpe newline", gpt, "Ċ", "\n"},
		{"bpe control", gpt, "<|endoftext|>", ""},
		{"bpe utf8 bytes", gpt, "Ã©", "é"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, ok := tc.tk.TokenID(tc.token)
			if !ok {
				t.Fatalf("no token %q", tc.token)
			}
			if got := tc.tk.Token(id); got != tc.token {
				t.Errorf("Token(%d) = %q", id, got)
			}
			if got := string(tc.tk.Piece(id)); got != tc.piece {
				t.Errorf("Piece(%d) = %q, want %q", id, got, tc.piece)
			}
		})
	}
	if spm.Piece(-1) != nil || spm.Piece(int32(spm.VocabSize())) != nil || spm.Token(-5) != "" {
		t.Error("out-of-range ids must give empty results")
	}
	if got := spm.Decode([]int32{-1, 99999999}); got != "" {
		t.Errorf("Decode of bad ids = %q", got)
	}
	if spm.VocabSize() != 32000 || gpt.VocabSize() != 50257 {
		t.Errorf("VocabSize = %d, %d", spm.VocabSize(), gpt.VocabSize())
	}
}

func TestStream(t *testing.T) {
	tk := tinySPM(t)
	id := func(s string) int32 { i, _ := tk.TokenID(s); return i }
	// "€" is E2 82 AC: no piece covers it, so it arrives as three byte tokens.
	steps := []struct {
		tok  string
		want string
	}{
		{"▁a", " a"},
		{"<0xE2>", ""},
		{"<0x82>", ""},
		{"<0xAC>", "€"},
		{"<s>", ""},
		{"<0xF0>", ""}, // first byte of a 4-byte character ...
		{"b", "\xf0b"}, // ... cut short: invalid bytes are passed on, not held forever
		{"<0xC3>", ""}, // "é" split into two byte tokens
		{"<0xA9>", "é"},
		{"<0xFF>", "\xff"}, // invalid byte passes at once
	}
	s := tk.NewStream()
	var all strings.Builder
	for i, st := range steps {
		got := s.Add(id(st.tok))
		all.WriteString(got)
		if got != st.want {
			t.Fatalf("step %d Add(%q) = %q, want %q", i, st.tok, got, st.want)
		}
	}
	if rest := s.Add(id("<0xE2>")) + s.Flush(); rest != "\xe2" {
		t.Errorf("Flush = %q, want the held-back byte", rest)
	}
	if s.Flush() != "" {
		t.Error("second Flush not empty")
	}
}

// TestDecodeLeadingSpace pins llama.cpp's detokenizer rule: with a space prefix (SPM), the first
// token loses one leading space, and a leading BOS consumes the rule.
func TestDecodeLeadingSpace(t *testing.T) {
	spm := loadShared(t, "vocab/ggml-vocab-llama-spm.gguf")
	gpt := loadShared(t, "vocab/ggml-vocab-gpt-2.gguf")
	tests := []struct {
		name string
		tk   *Tokenizer
		ids  []int32
		want string
	}{
		{"spm first token stripped", spm, spm.Encode("Hello world", false, false), "Hello world"},
		{"spm only one space stripped", spm, spm.Encode("  Hi", false, false), "  Hi"},
		{"spm after BOS kept", spm, spm.Encode("Hello", true, false), " Hello"},
		{"bpe never stripped", gpt, gpt.Encode(" Hello", false, false), " Hello"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tk.Decode(tc.ids); got != tc.want {
				t.Fatalf("Decode(%v) = %q, want %q", tc.ids, got, tc.want)
			}
		})
	}
}

func TestConcurrentEncode(t *testing.T) {
	tk := loadShared(t, "vocab/ggml-vocab-llama3.gguf")
	text := benchPrompt()
	want := tk.Encode(text, true, true)
	errs := make(chan string, 4)
	for range 4 {
		go func() {
			for range 20 {
				if got := tk.Encode(text, true, true); !slices.Equal(got, want) {
					errs <- "concurrent Encode differs"
					return
				}
			}
			errs <- ""
		}()
	}
	for range 4 {
		if e := <-errs; e != "" {
			t.Fatal(e)
		}
	}
}
