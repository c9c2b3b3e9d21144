package tokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// pieces runs a pre-tokenizer over text and returns the pieces as strings.
func pieces(p preTokenizer, text string) []string {
	rs := []rune(text)
	ends, _ := p.split(rs, nil, nil)
	var out []string
	start := int32(0)
	for _, e := range ends {
		out = append(out, string(rs[start:e]))
		start = e
	}
	return out
}

func TestPreTokenizers(t *testing.T) {
	tests := []struct {
		name string
		pre  string
		text string
		want []string
	}{
		{"gpt2 words", "gpt-2", "Hello world", []string{"Hello", " world"}},
		{"gpt2 contraction case-sensitive", "gpt-2", "I'm I'M", []string{"I", "'m", " I", "'", "M"}},
		{"gpt2 leaves last space to the word", "gpt-2", "a   b", []string{"a", "  ", " b"}},
		{"gpt2 trailing spaces", "gpt-2", "a  ", []string{"a", "  "}},
		{"gpt2 newline before word unmatched", "gpt-2", "a\nb", []string{"a", "\n", "b"}},
		{"gpt2 numbers and symbols", "gpt-2", "x=12345!?", []string{"x", "=", "12345", "!?"}},
		{"gpt2 space before digits", "gpt-2", " 42 ...", []string{" 42", " ..."}},
		{"llama3 contraction folds case", "llama3", "I'M", []string{"I", "'M"}},
		{"llama3 digits in threes", "llama3", "1234567", []string{"123", "456", "7"}},
		{"llama3 prefix char joins letters", "llama3", "\tab x_cd _e", []string{"\tab", " x", "_cd", " _", "e"}},
		{"llama3 punctuation keeps newlines", "llama3", "a!!\n\nb", []string{"a", "!!\n\n", "b"}},
		{"llama3 whitespace up to last newline", "llama3", "a \n \n  b", []string{"a", " \n \n", " ", " b"}},
		{"llama3 lone space before digit", "llama3", "a 1", []string{"a", " ", "1"}},
		{"qwen2 single digits", "qwen2", "2024", []string{"2", "0", "2", "4"}},
		{"starcoder digits split first", "starcoder", "ab12 3", []string{"ab", "1", "2", " ", "3"}},
		{"falcon punctuation first", "falcon", "a.b 1234", []string{"a", ".", "b", " ", "123", "4"}},
		{"default", "default", "x+=1000;", []string{"x", "+=", "100", "0", ";"}},
		{"deepseek-coder", "deepseek-coder", "a\nb 12 中文 x!", []string{"a", "\n", "b", " ", "1", "2", " ", "中文", " x", "!"}},
		{"unicode letters and marks", "gpt-2", "naïve café", []string{"naïve", " café"}},
		{"o200k splits CamelCase", "gpt-4o", "XMLHttpRequest isOK", []string{"XMLHttp", "Request", " is", "OK"}},
		{"o200k contraction after capitals", "gpt-4o", "WE'LL don't", []string{"WE'LL", " don't"}},
		{"o200k slashes and newlines join punctuation", "gpt-4o", "a//\n\nb 1234", []string{"a", "//\n\n", "b", " ", "123", "4"}},
		{"empty", "llama3", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := preTokenizers[tc.pre]
			if !ok {
				t.Fatalf("no pre-tokenizer %q", tc.pre)
			}
			if got := pieces(p, tc.text); !slices.Equal(got, tc.want) {
				t.Fatalf("split(%q) = %q, want %q", tc.text, got, tc.want)
			}
		})
	}
}

func TestCompleteUTF8(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int
	}{
		{"empty", "", 0},
		{"ascii", "abc", 3},
		{"complete 2-byte", "é", 2},
		{"lead of 2-byte", "a\xc3", 1},
		{"2 of 3 bytes", "a\xe2\x82", 1},
		{"3 of 4 bytes", "\xf0\x9f\xa6", 0},
		{"complete 4-byte", "🦙", 4},
		{"invalid lead passes", "a\xff", 2},
		{"stray continuation passes", "a\x82", 2},
		{"broken sequence passes", "\xe2a", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := completeUTF8([]byte(tc.in)); got != tc.want {
				t.Fatalf("completeUTF8(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestDecodeRunes(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []rune
	}{
		{"valid", "aé🦙", []rune{'a', 'é', '🦙'}},
		{"bad byte", "a\xffb", []rune{'a', 0xFFFD, 'b'}},
		{"truncated", "\xe2\x82", []rune{0xFFFD, 0xFFFD}},
		{"surrogate kept as llama.cpp does", "\xed\xa0\x80", []rune{0xD800}},
		{"overlong kept as llama.cpp does", "\xc1\x81", []rune{'A'}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decodeRunes(tc.in, nil); !slices.Equal(got, tc.want) {
				t.Fatalf("decodeRunes(%q) = %U, want %U", tc.in, got, tc.want)
			}
		})
	}
	// appendCpt is the inverse for every code point decodeRunes produces
	for _, r := range []rune{0, 'A', 0x7FF, 0x800, 0xD800, 0xFFFF, 0x10000, 0x10FFFF} {
		b := appendCpt(nil, r)
		if got := decodeRunes(string(b), nil); len(got) != 1 || got[0] != r {
			t.Errorf("round trip of %U via %x gave %U", r, b, got)
		}
	}
}

func TestByteUnicode(t *testing.T) {
	seen := map[string]bool{}
	for b := range 256 {
		s := byteUnicode[b]
		if seen[s] {
			t.Fatalf("byte %d maps to %q twice", b, s)
		}
		seen[s] = true
		if got := appendByteDecoded(nil, s); len(got) != 1 || got[0] != byte(b) {
			t.Fatalf("byte %d -> %q -> %v", b, s, got)
		}
	}
	if byteUnicode[' '] != "Ġ" || byteUnicode['\n'] != "Ċ" || byteUnicode['A'] != "A" {
		t.Errorf("space %q newline %q", byteUnicode[' '], byteUnicode['\n'])
	}
}

// TestO200kVectors: the o200k pre-tokenizer (tokenizer.ggml.pre "gpt-4o", gpt-oss's) cuts each
// input of testdata/o200k_pretok.json where tiktoken's pattern does, as node's regex engine
// runs it (testdata/o200k_pretok.mjs made the file; the command is in it).
func TestO200kVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/o200k_pretok.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vectors []struct {
			Text   string   `json:"text"`
			Pieces []string `json:"pieces"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Vectors) < 300 {
		t.Fatalf("%d vectors, want the file's 328", len(file.Vectors))
	}
	for _, name := range []string{"gpt-4o", "llama4"} {
		p, ok := preTokenizers[name]
		if !ok {
			t.Fatalf("no pre-tokenizer %q", name)
		}
		for i, v := range file.Vectors {
			if got := pieces(p, v.Text); !slices.Equal(got, v.Pieces) {
				t.Errorf("%s vector %d: split(%q) = %q, want %q", name, i, v.Text, got, v.Pieces)
			}
		}
	}
}

// FuzzO200k: the o200k split of any text is non-empty pieces that join into the text.
func FuzzO200k(f *testing.F) {
	for _, s := range []string{"XMLHttpRequest", "don't", "a//\n\nb", "cafe\u0301", " 'S\u0301", "\u0301'll"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got := pieces(preO200k, text)
		joined := ""
		for _, p := range got {
			if p == "" {
				t.Fatalf("split(%q) = %q: an empty piece", text, got)
			}
			joined += p
		}
		if joined != string([]rune(text)) {
			t.Fatalf("split(%q) = %q: does not join into the text", text, got)
		}
	})
}
