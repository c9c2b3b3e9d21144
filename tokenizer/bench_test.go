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

// TestEncodeSpeed guards against slow or super-linear encoding. A 4000-character prompt must
// encode quickly (the target is well under 10 ms; the bound is loose for loaded or -race runs),
// and long single words (one SPM symbol run, one BPE pre-token) must scale near-linearly:
// quadrupling the length may cost at most 12x (a quadratic algorithm costs 16x). Under the race
// detector the timings are only logged.
func TestEncodeSpeed(t *testing.T) {
	best := func(f func()) time.Duration {
		d := time.Hour
		for range 3 {
			start := time.Now()
			f()
			d = min(d, time.Since(start))
		}
		return d
	}
	prompt := benchPrompt()
	for _, name := range benchVocabs {
		tk := loadShared(t, "vocab/ggml-vocab-"+name+".gguf")
		d := best(func() { tk.Encode(prompt, false, false) })
		t.Logf("%s prompt (%d bytes): %v", name, len(prompt), d)
		if d > 200*time.Millisecond && !raceEnabled {
			t.Errorf("%s: 4000-character prompt took %v", name, d)
		}
		for _, unit := range []string{"abcdefghij", "1234567890", "          ", "ab ab ab\n\n"} {
			small := strings.Repeat(unit, 500)
			large := strings.Repeat(unit, 2000)
			ds := best(func() { tk.Encode(small, false, false) })
			dl := best(func() { tk.Encode(large, false, false) })
			t.Logf("%s %q x500: %v, x2000: %v", name, unit, ds, dl)
			if dl > 12*ds && dl > 5*time.Millisecond && !raceEnabled {
				t.Errorf("%s %q: 4x longer input took %.1fx longer (%v vs %v)", name, unit, float64(dl)/float64(ds), dl, ds)
			}
		}
	}
}
