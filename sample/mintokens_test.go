package sample

import (
	"errors"
	"testing"
)

// TestMinTokens: end tokens are not sampled before MinTokens draws, even when a +100 bias all but
// forces them (greedy and sampled), and they come back right after; Reset starts the count over.
func TestMinTokens(t *testing.T) {
	const eos = 0
	logits := []float32{0, 1, 2, 3, 0.5}
	for _, tc := range []struct {
		name      string
		temp      float32
		minTokens int
	}{
		{name: "greedy", temp: 0, minTokens: 5},
		{name: "sampled", temp: 1, minTokens: 7},
		{name: "hot", temp: 5, minTokens: 3},
		{name: "one", temp: 0, minTokens: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := onlyParams(tc.temp)
			p.Seed = 3
			p.LogitBias = map[int32]float32{eos: 100}
			p.MinTokens, p.EndTokens = tc.minTokens, []int32{eos}
			s, err := New(p, len(logits))
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // the second pass after Reset
				for i := range tc.minTokens {
					if tok := s.Sample(logits); tok == eos || tok < 0 {
						t.Fatalf("token %d of at least %d: sampled %d", i, tc.minTokens, tok)
					}
				}
				if tok := s.Sample(logits); tok != eos {
					t.Fatalf("after %d tokens the +100 end token was not sampled: %d", tc.minTokens, tok)
				}
				s.Reset()
			}
		})
	}
	if err := (&Params{TopP: 1, RepeatPenalty: 1, MinTokens: -1}).Validate(4); err == nil {
		t.Error("a negative min_tokens was accepted")
	}
	if err := (&Params{TopP: 1, RepeatPenalty: 1, MinTokens: 1, EndTokens: []int32{9}}).Validate(4); err == nil {
		t.Error("an end token outside the vocabulary was accepted")
	}
}

// TestMinTokensGrammar: a grammar complete before MinTokens, with only the end left, fails as a
// request error naming min_tokens; a grammar that can go on writes on.
func TestMinTokensGrammar(t *testing.T) {
	logits := make([]float32, len(grammarPieces))
	logits[0] = 50 // the end of generation, wanted as soon as allowed
	for _, tc := range []struct {
		name      string
		src       string
		minTokens int
		wantErr   bool
	}{
		{name: "complete too early", src: `root ::= "ab"`, minTokens: 3, wantErr: true},
		{name: "long enough", src: `root ::= "a" "b" "a"`, minTokens: 3},
		{name: "can go on", src: `root ::= "a"+`, minTokens: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := grammarParams(t, 0, tc.src)
			p.MinTokens, p.EndTokens = tc.minTokens, []int32{0}
			s, err := New(p, len(grammarPieces))
			if err != nil {
				t.Fatal(err)
			}
			var out []int32
			for range 10 {
				tok := s.Sample(logits)
				if tok < 0 {
					var re *RequestError
					if !tc.wantErr || !errors.As(s.Err(), &re) || re.Param != "min_tokens" {
						t.Fatalf("after %q: %v, want it to go on", tokenText(out), s.Err())
					}
					return
				}
				if tok == 0 {
					break
				}
				out = append(out, tok)
			}
			if tc.wantErr || len(out) < tc.minTokens {
				t.Fatalf("ended after %d tokens (%q), min_tokens %d, want error %v", len(out), tokenText(out), tc.minTokens, tc.wantErr)
			}
		})
	}
}
