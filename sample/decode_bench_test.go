package sample_test

import (
	"testing"
	"time"

	"ubatch/batch"
	"ubatch/grammar"
	"ubatch/internal/testdata"
	"ubatch/internal/testmodel"
	_ "ubatch/model/all"
	"ubatch/runner"
	"ubatch/sample"
)

// decodeGrammars never complete, so that every stream generates the same number of tokens
// (end of generation is excluded): free text, which the model's own choice nearly always fits;
// an endless JSON array of strings, whose brackets, quotes and commas the model does not write
// by itself (greedy: 7 of 256 steps go through the mask); and numbers, which the story model
// never writes, so that every step goes through the mask.
var decodeGrammars = []struct{ name, src string }{
	{"text", `root ::= [^\x00-\x08]*`},
	{"json-strings", `root ::= "[\"" char* "\"" ( ", \"" char* "\"" )*
char ::= [^"\\\x00-\x1F] | "\\" ["\\n]`},
	{"numbers", `root ::= ( [0-9]{1,3} ( "." [0-9] )? [ ,] )*`},
}

const decodeTokens = 256

// benchDecode generates decodeTokens tokens after "Once upon a time" on stories260K, one decode
// step and one Sample per token, as the engine does for one sequence, and reports ns/token
// (sampler included: creating it, and its grammar's caches, is part of every stream).
func benchDecode(b *testing.B, src string, temp float32) {
	m := testmodel.Open(b, testdata.Model(b, "stories260K.gguf"))
	c := testmodel.Session(b, m, runner.Options{NCtx: 512, Threads: 1})
	p := sample.DefaultParams()
	p.Temperature, p.Seed, p.IgnoreTokens = temp, 1, m.Vocab.EOG()
	if src != "" {
		var err error
		if p.Grammar, err = grammar.Parse(src); err != nil {
			b.Fatal(err)
		}
		pieces := make([][]byte, m.Vocab.VocabSize())
		for i := range pieces {
			pieces[i] = m.Vocab.Piece(int32(i))
		}
		if p.GrammarVocab, err = grammar.NewVocab(pieces, m.Vocab.EOG()); err != nil {
			b.Fatal(err)
		}
	}
	prompt := m.Vocab.Encode("Once upon a time", true, false)
	seq := []int32{0}
	var bt batch.Batch
	var total, sampling time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		s, err := sample.New(p, m.Vocab.VocabSize()) // a sampler (and matcher) per sequence
		if err != nil {
			b.Fatal(err)
		}
		c.KV().Clear()
		bt.Clear()
		for i, t := range prompt {
			bt.Add(t, int32(i), seq, i == len(prompt)-1)
		}
		pos := int32(len(prompt))
		for range decodeTokens {
			if err := c.Decode(&bt); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			tok := s.Sample(c.Logits(bt.Len() - 1))
			if tok < 0 {
				b.Fatal(s.Err())
			}
			s.Accept(tok)
			sampling += time.Since(t0)
			bt.Clear()
			bt.Add(tok, pos, seq, true)
			pos++
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*decodeTokens), "ns/token")
	// The sampler's share alone, which the grammar changes, is steadier than the total on a
	// shared machine.
	b.ReportMetric(float64(sampling.Nanoseconds())/float64(b.N*decodeTokens), "sample-ns/token")
}

func BenchmarkDecodeStories(b *testing.B) {
	for _, temp := range []struct {
		name string
		t    float32
	}{{"greedy", 0}, {"sampled", 0.8}} {
		b.Run(temp.name+"/unconstrained", func(b *testing.B) { benchDecode(b, "", temp.t) })
		for _, g := range decodeGrammars {
			b.Run(temp.name+"/"+g.name, func(b *testing.B) { benchDecode(b, g.src, temp.t) })
		}
	}
}
