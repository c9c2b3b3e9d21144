package sample

import (
	"os"
	"path/filepath"
	"testing"

	"ubatch/gguf"
	"ubatch/grammar"
	"ubatch/internal/testdata"
	"ubatch/tokenizer"
)

// benchRow returns a realistic 32000-entry logits row (llama.cpp's output for a real prompt
// position of the synthetic Llama-vocabulary model) or, without the shared data, a random one.
func benchRow(b *testing.B, n int) []float32 {
	if n == 32000 {
		dir, ok := testdata.Lookup()
		if _, err := os.Stat(filepath.Join(dir, "reference", "synth-tiny-q8_0.json")); ok && err == nil {
			ref := testdata.LoadReference(b, "synth-tiny-q8_0")
			return ref.Row(len(ref.PromptTokens) - 1)
		}
	}
	return randomLogits(1, n)
}

func benchSample(b *testing.B, n int, mod func(*Params)) {
	logits := benchRow(b, n)
	p := DefaultParams()
	p.Seed = 3
	mod(&p)
	s := mustNew(b, p, n)
	for i := range 64 {
		s.Accept(int32(i * 13 % n))
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Sample(logits)
	}
}

func BenchmarkSampleDefault32k(b *testing.B)  { benchSample(b, 32000, func(*Params) {}) }
func BenchmarkSampleDefault150k(b *testing.B) { benchSample(b, 150000, func(*Params) {}) }
func BenchmarkSampleGreedy32k(b *testing.B) {
	benchSample(b, 32000, func(p *Params) { p.Temperature = 0 })
}
func BenchmarkSampleTopPOnly32k(b *testing.B) {
	benchSample(b, 32000, func(p *Params) { p.TopK = 0; p.MinP = 0 })
}
func BenchmarkSampleTopPOnlyRandom32k(b *testing.B) {
	logits := randomLogits(2, 32000)
	p := DefaultParams()
	p.TopK, p.MinP = 0, 0
	s := mustNew(b, p, len(logits))
	b.ReportAllocs()
	for b.Loop() {
		s.Sample(logits)
	}
}
func BenchmarkSamplePenalties32k(b *testing.B) {
	benchSample(b, 32000, func(p *Params) { p.RepeatPenalty = 1.1; p.FrequencyPenalty = 0.1; p.PresencePenalty = 0.1 })
}

func BenchmarkLogProbs32k(b *testing.B) {
	logits := benchRow(b, 32000)
	b.ReportAllocs()
	for b.Loop() {
		LogProbs(logits, 7, 5)
	}
}

// benchGrammar samples from the 32000-token row with the JSON-strings grammar positioned at
// prefix: inside a string the row's choice passes the grammar check; where a key must start it
// does not, and the allowed tokens' mask (cached after the first call) is applied.
func benchGrammar(b *testing.B, temp float32, prefix string) {
	logits := benchRow(b, 32000)
	f, err := gguf.Open(testdata.Model(b, "vocab/ggml-vocab-llama-spm.gguf"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	tk, err := tokenizer.FromGGUF(f)
	if err != nil {
		b.Fatal(err)
	}
	pieces := make([][]byte, tk.VocabSize())
	for i := range pieces {
		pieces[i] = tk.Piece(int32(i))
	}
	p := DefaultParams()
	p.Temperature, p.Seed = temp, 3
	if p.GrammarVocab, err = grammar.NewVocab(pieces, tk.EOG()); err != nil {
		b.Fatal(err)
	}
	if p.Grammar, err = grammar.Parse(`root ::= "{" ( "\"" [a-z]+ "\": \"" [^"\\]* "\"" ( ", " | "}" ) )+`); err != nil {
		b.Fatal(err)
	}
	s := mustNew(b, p, len(logits))
	b.ReportAllocs()
	for b.Loop() {
		s.Reset()
		if err := s.gm.AcceptBytes([]byte(prefix)); err != nil {
			b.Fatal(err)
		}
		if s.Sample(logits) < 0 {
			b.Fatal(s.Err())
		}
	}
}

func BenchmarkSampleGrammar32k(b *testing.B) {
	for _, c := range []struct{ name, prefix string }{{"string", `{"story": "Once upon`}, {"key", `{"a": "b", `}} {
		b.Run("greedy/"+c.name, func(b *testing.B) { benchGrammar(b, 0, c.prefix) })
		b.Run("default/"+c.name, func(b *testing.B) { benchGrammar(b, 0.8, c.prefix) })
	}
}
