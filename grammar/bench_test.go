package grammar

import (
	"context"
	"errors"
	"testing"
	"time"

	"ubatch/gguf"
	"ubatch/internal/testdata"
	"ubatch/tokenizer"
)

// modelVocab builds the grammar Vocab of a real tokenizer from the shared data (skips without).
func modelVocab(tb testing.TB, name string) (*Vocab, *tokenizer.Tokenizer) {
	tb.Helper()
	f, err := gguf.Open(testdata.Model(tb, name))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	tk, err := tokenizer.FromGGUF(f)
	if err != nil {
		tb.Fatal(err)
	}
	pieces := make([][]byte, tk.VocabSize())
	for i := range pieces {
		pieces[i] = tk.Piece(int32(i))
	}
	v, err := NewVocab(pieces, tk.EOG())
	if err != nil {
		tb.Fatal(err)
	}
	return v, tk
}

var benchVocabs = []struct{ name, file string }{
	{"512", "stories260K.gguf"},
	{"32k", "vocab/ggml-vocab-llama-spm.gguf"},
	{"128k", "vocab/ggml-vocab-llama3.gguf"},
}

// benchContexts are points in a JSON output: inside a string (most tokens allowed) and where a
// key must start (few allowed).
var benchContexts = []struct{ name, prefix string }{
	{"string", `{"story": "Once upon a time, there was`},
	{"key", `{"story": "x", `},
}

func benchMatcher(b *testing.B, v *Vocab, prefix string) *Matcher {
	m := NewMatcher(mustParse(b, jsonGBNF), v)
	if err := m.AcceptBytes([]byte(prefix)); err != nil {
		b.Fatal(err)
	}
	return m
}

// benchMasks runs body as a sub-benchmark for every benchmark vocabulary and JSON context, on a
// matcher that has accepted the context's prefix.
func benchMasks(b *testing.B, body func(b *testing.B, m *Matcher, prefix string)) {
	for _, bv := range benchVocabs {
		v, _ := modelVocab(b, bv.file)
		for _, bc := range benchContexts {
			b.Run(bv.name+"/"+bc.name, func(b *testing.B) { body(b, benchMatcher(b, v, bc.prefix), bc.prefix) })
		}
	}
}

// BenchmarkMaskCold computes a mask from nothing: a fresh matcher state, no cached steps.
func BenchmarkMaskCold(b *testing.B) {
	benchMasks(b, func(b *testing.B, m *Matcher, prefix string) {
		b.ReportAllocs()
		for b.Loop() {
			m.Reset()
			if err := m.AcceptBytes([]byte(prefix)); err != nil {
				b.Fatal(err)
			}
			m.Mask()
		}
		b.ReportMetric(float64(m.work), "work/op")
	})
}

// BenchmarkMaskWarm recomputes a mask whose byte steps are all cached: the trie walk alone.
func BenchmarkMaskWarm(b *testing.B) {
	benchMasks(b, func(b *testing.B, m *Matcher, _ string) {
		m.Mask()
		mask := make([]uint64, len(m.Mask()))
		b.ReportAllocs()
		for b.Loop() {
			clear(mask)
			m.fillMask(m.cur, mask)
		}
	})
}

// BenchmarkAcceptToken checks and accepts one token inside a string, as the sampler does when
// the model's choice fits the grammar.
func BenchmarkAcceptToken(b *testing.B) {
	for _, bv := range benchVocabs {
		v, tk := modelVocab(b, bv.file)
		b.Run(bv.name, func(b *testing.B) {
			m := benchMatcher(b, v, benchContexts[0].prefix)
			tok := tk.Encode(" upon", false, false)[0]
			b.ReportAllocs()
			for b.Loop() {
				if err := m.AcceptToken(tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMaskAttack is the time of one cold mask of the attack grammar (compiled with a raised
// MaxElements: the default refuses it) at the start of the output, as the scheduler computes it
// when a logit_bias makes the model's choice always refused: without a budget, and with the
// default one, which stops it. work/op is the matcher's count of units of work.
func BenchmarkMaskAttack(b *testing.B) {
	g, err := Compile(context.Background(), testdata.MaskAttackGBNF(), Limits{MaxElements: 1 << 21, MaxTime: time.Minute}) // 1-2 s to compile under load: not what is measured
	if err != nil {
		b.Fatal(err)
	}
	for _, bv := range []struct{ name, file string }{{"32k", "vocab/ggml-vocab-llama-spm.gguf"}, {"128k", "vocab/ggml-vocab-llama3.gguf"}} {
		v, _ := modelVocab(b, bv.file)
		for _, bb := range []struct {
			name   string
			budget int
		}{{"unbounded", 1 << 62}, {"default", 0}} {
			b.Run(bv.name+"/"+bb.name, func(b *testing.B) {
				m := NewMatcher(g, v)
				m.SetBudget(bb.budget)
				b.ReportAllocs()
				for b.Loop() {
					m.Reset()
					m.Mask()
				}
				b.ReportMetric(float64(m.work), "work/op")
				if bb.budget == 0 && !errors.Is(m.Err(), ErrBudget) {
					b.Fatalf("Err %v, want ErrBudget", m.Err())
				}
			})
		}
	}
}
