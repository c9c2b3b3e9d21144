package tokenizer

import (
	"fmt"
	"strings"
	"testing"
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

// TestEncodeSpeed guards against slow or super-linear encoding. A 4000-character prompt must
// encode quickly (the target is well under 10 ms; the bound is loose for loaded or -race runs),
// and long single words (one SPM symbol run, one BPE pre-token) must scale near-linearly:
// quadrupling the length may cost at most 12x (a quadratic algorithm costs 16x). Under the race
// detector the timings are only logged.
// BenchmarkEncodeLongWords times inputs of 500 and 2000 repetitions of one unit: a linear
// tokenizer takes about 4x longer for the second, a quadratic one 16x. (Timing stays out of the
// unit tests: compare the two sub-benchmarks.)
func BenchmarkEncodeLongWords(b *testing.B) {
	for _, name := range benchVocabs {
		tk := loadShared(b, "vocab/ggml-vocab-"+name+".gguf")
		for _, unit := range []string{"abcdefghij", "1234567890", "          ", "ab ab ab\n\n"} {
			for _, reps := range []int{500, 2000} {
				text := strings.Repeat(unit, reps)
				b.Run(fmt.Sprintf("%s/%q/x%d", name, unit, reps), func(b *testing.B) {
					b.SetBytes(int64(len(text)))
					for b.Loop() {
						tk.Encode(text, false, false)
					}
				})
			}
		}
	}
}
