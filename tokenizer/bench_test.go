package tokenizer

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// benchPrompt is a 4000-character prompt mixing prose, code, numbers and non-Latin text.
func benchPrompt() string {
	const para = "Once upon a time, in a small village by the sea, there lived a girl named Lily. " +
		"She loved to read books about faraway places — Paris, Tōkyō, and Zürich. " +
		"func main() {\n\tfor i := 0; i < 1024; i++ {\n\t\tfmt.Printf(\"%d: %s\\n\", i, names[i])\n\t}\n}\n" +
		"Прекрасный день для прогулки. 今天天气很好。 The total was $3,141.59 (≈ 3.14e3).\n\n"
	var sb strings.Builder
	for utf8.RuneCountInString(sb.String()) < 4000 {
		sb.WriteString(para)
	}
	rs := []rune(sb.String())
	return string(rs[:4000])
}

var benchVocabs = []string{"llama-spm", "gpt-2", "llama3", "qwen3"}

func BenchmarkEncode(b *testing.B) {
	prompt := benchPrompt()
	for _, name := range benchVocabs {
		b.Run(name, func(b *testing.B) {
			tk := loadShared(b, "vocab/ggml-vocab-"+name+".gguf")
			b.SetBytes(int64(len(prompt)))
			b.ReportAllocs()
			for b.Loop() {
				tk.Encode(prompt, true, false)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	prompt := benchPrompt()
	for _, name := range benchVocabs {
		b.Run(name, func(b *testing.B) {
			tk := loadShared(b, "vocab/ggml-vocab-"+name+".gguf")
			ids := tk.Encode(prompt, false, false)
			b.SetBytes(int64(len(prompt)))
			b.ReportAllocs()
			for b.Loop() {
				tk.Decode(ids)
			}
		})
	}
}

func BenchmarkStream(b *testing.B) {
	tk := loadShared(b, "vocab/ggml-vocab-llama-spm.gguf")
	ids := tk.Encode(benchPrompt(), false, false)
	b.ReportAllocs()
	for b.Loop() {
		s := tk.NewStream()
		for _, id := range ids {
			s.Add(id)
		}
		s.Flush()
	}
}

// TestEncodeSpeed guards against super-linear encoding: a 4000-character prompt, and single
// 20000-character words (one SPM symbol run, one BPE pre-token), must encode quickly. The bound
// is loose (the target is well under 10 ms per prompt) so that a loaded CI machine passes.
func TestEncodeSpeed(t *testing.T) {
	inputs := []struct {
		name string
		text string
	}{
		{"prompt", benchPrompt()},
		{"long word", strings.Repeat("abcdefghij", 2000)},
		{"long digits", strings.Repeat("1234567890", 2000)},
		{"long spaces", strings.Repeat(" ", 20000)},
	}
	for _, name := range benchVocabs {
		tk := loadShared(t, "vocab/ggml-vocab-"+name+".gguf")
		for _, in := range inputs {
			best := time.Hour
			for range 3 {
				start := time.Now()
				tk.Encode(in.text, false, false)
				best = min(best, time.Since(start))
			}
			t.Logf("%s %s (%d bytes): %v", name, in.name, len(in.text), best)
			if best > 200*time.Millisecond {
				t.Errorf("%s %s: %v, want well under 200ms", name, in.name, best)
			}
		}
	}
}
