package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// probsToLogits returns log(p) for each probability, a row whose softmax is p.
func probsToLogits(p []float64) []float32 {
	l := make([]float32, len(p))
	for i, v := range p {
		l[i] = float32(math.Log(v))
	}
	return l
}

func randomLogits(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 3)
	}
	return l
}

func mustNew(t testing.TB, p Params, vocab int) *Sampler {
	t.Helper()
	s, err := New(p, vocab)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// seededOver is a sampler of onlyParams(1) with seed and then mod applied, over a vocabulary of
// len(probs), and the logits whose softmax is probs.
func seededOver(t testing.TB, seed uint64, mod func(*Params), probs []float64) (*Sampler, []float32) {
	t.Helper()
	p := onlyParams(1)
	p.Seed = seed
	mod(&p)
	return mustNew(t, p, len(probs)), probsToLogits(probs)
}

// onlyParams returns parameters with every filter and penalty off at temperature temp.
func onlyParams(temp float32) Params {
	return Params{Temperature: temp, TopP: 1, RepeatPenalty: 1, RepeatLastN: 64}
}

func TestNewValidation(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	mod := func(f func(*Params)) Params { p := DefaultParams(); f(&p); return p }
	tests := []struct {
		name    string
		p       Params
		vocab   int
		wantErr string
	}{
		{name: "defaults", p: DefaultParams(), vocab: 10},
		{name: "negative temperature", p: mod(func(p *Params) { p.Temperature = -1 }), vocab: 10, wantErr: "temperature"},
		{name: "temperature above 100", p: mod(func(p *Params) { p.Temperature = 101 }), vocab: 10, wantErr: "temperature"},
		{name: "top_k negative", p: mod(func(p *Params) { p.TopK = -1 }), vocab: 10, wantErr: "top_k"},
		{name: "top_k zero means off", p: mod(func(p *Params) { p.TopK = 0 }), vocab: 10},
		{name: "top_p one", p: mod(func(p *Params) { p.TopP = 1 }), vocab: 10},
		{name: "zero vocab", p: DefaultParams(), vocab: 0, wantErr: "vocabulary size"},
		{name: "top_p zero", p: mod(func(p *Params) { p.TopP = 0 }), vocab: 10, wantErr: "top_p"},
		{name: "top_p above one", p: mod(func(p *Params) { p.TopP = 1.5 }), vocab: 10, wantErr: "top_p"},
		{name: "top_p NaN", p: mod(func(p *Params) { p.TopP = nan }), vocab: 10, wantErr: "top_p"},
		{name: "min_p negative", p: mod(func(p *Params) { p.MinP = -0.1 }), vocab: 10, wantErr: "min_p"},
		{name: "min_p above one", p: mod(func(p *Params) { p.MinP = 2 }), vocab: 10, wantErr: "min_p"},
		{name: "temperature NaN", p: mod(func(p *Params) { p.Temperature = nan }), vocab: 10, wantErr: "temperature"},
		{name: "temperature Inf", p: mod(func(p *Params) { p.Temperature = inf }), vocab: 10, wantErr: "temperature"},
		{name: "repeat penalty zero", p: mod(func(p *Params) { p.RepeatPenalty = 0 }), vocab: 10, wantErr: "repeat_penalty"},
		{name: "repeat penalty Inf", p: mod(func(p *Params) { p.RepeatPenalty = inf }), vocab: 10, wantErr: "repeat_penalty"},
		{name: "repeat penalty above 100", p: mod(func(p *Params) { p.RepeatPenalty = 101 }), vocab: 10, wantErr: "repeat_penalty"},
		{name: "repeat last n", p: mod(func(p *Params) { p.RepeatLastN = -2 }), vocab: 10, wantErr: "repeat_last_n"},
		{name: "frequency Inf", p: mod(func(p *Params) { p.FrequencyPenalty = inf }), vocab: 10, wantErr: "frequency_penalty"},
		{name: "presence NaN", p: mod(func(p *Params) { p.PresencePenalty = nan }), vocab: 10, wantErr: "presence_penalty"},
		{name: "frequency above 2", p: mod(func(p *Params) { p.FrequencyPenalty = 2.5 }), vocab: 10, wantErr: "frequency_penalty"},
		{name: "presence below -2", p: mod(func(p *Params) { p.PresencePenalty = -2.5 }), vocab: 10, wantErr: "presence_penalty"},
		{name: "penalties at their bounds", p: mod(func(p *Params) { p.FrequencyPenalty, p.PresencePenalty, p.RepeatPenalty = 2, -2, 100 }), vocab: 10},
		{name: "logit_bias token outside", p: mod(func(p *Params) { p.LogitBias = map[int32]float32{10: 1} }), vocab: 10, wantErr: "logit_bias"},
		{name: "logit_bias above 100", p: mod(func(p *Params) { p.LogitBias = map[int32]float32{3: 101} }), vocab: 10, wantErr: "logit_bias"},
		{name: "ignored token too large", p: mod(func(p *Params) { p.IgnoreTokens = []int32{10} }), vocab: 10, wantErr: "ignore_tokens must be a token id in [0, 10), got 10"},
		{name: "ignored token negative", p: mod(func(p *Params) { p.IgnoreTokens = []int32{-1} }), vocab: 10, wantErr: "ignore_tokens must be a token id in [0, 10), got -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.p, tc.vocab)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("expected error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error %q does not mention %q", err, tc.wantErr)
			}
		})
	}
}

func TestGreedy(t *testing.T) {
	nan := float32(math.NaN())
	negInf := float32(math.Inf(-1))
	tests := []struct {
		name   string
		p      Params
		accept []int32
		logits []float32
		want   int32
	}{
		{name: "plain argmax", p: onlyParams(0), logits: []float32{1, 3, 2}, want: 1},
		{name: "tie goes to lowest id", p: onlyParams(0), logits: []float32{1, 5, 5, 5}, want: 1},
		{name: "NaN skipped", p: onlyParams(0), logits: []float32{nan, 1, 0}, want: 1},
		{name: "all NaN", p: onlyParams(0), logits: []float32{nan, nan}, want: -1},
		{name: "empty row", p: onlyParams(0), logits: nil, want: -1},
		{name: "all -Inf", p: onlyParams(0), logits: []float32{negInf, negInf}, want: 0},
		{name: "ignored argmax", p: withIgnore(onlyParams(0), 1), logits: []float32{1, 3, 2}, want: 2},
		{name: "everything ignored", p: withIgnore(onlyParams(0), 0, 1), logits: []float32{1, 3}, want: -1},
		{name: "all -Inf but one ignored", p: withIgnore(onlyParams(0), 0), logits: []float32{negInf, negInf}, want: 1},
		{
			name:   "repeat penalty moves argmax",
			p:      Params{Temperature: 0, TopP: 1, RepeatPenalty: 2, RepeatLastN: 8},
			accept: []int32{1},
			logits: []float32{1, 3, 2}, // 3/2 = 1.5 < 2
			want:   2,
		},
		{
			name:   "presence penalty moves argmax",
			p:      Params{Temperature: 0, TopP: 1, RepeatPenalty: 1, RepeatLastN: 8, PresencePenalty: 1.5},
			accept: []int32{1, 1},
			logits: []float32{1, 3, 2},
			want:   2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustNew(t, tc.p, max(len(tc.logits), 4))
			for _, a := range tc.accept {
				s.Accept(a)
			}
			if got := s.Sample(tc.logits); got != tc.want {
				t.Fatalf("Sample = %d, want %d", got, tc.want)
			}
		})
	}
}

func withIgnore(p Params, ids ...int32) Params {
	p.IgnoreTokens = ids
	return p
}

func TestPenalties(t *testing.T) {
	logits := []float32{2, -2, 1, 0.5, 3}
	tests := []struct {
		name   string
		p      Params
		accept []int32
		want   []float32
	}{
		{
			name:   "repeat divides positive, multiplies negative",
			p:      Params{RepeatPenalty: 2, RepeatLastN: 64},
			accept: []int32{0, 1, 0},
			want:   []float32{1, -4, 1, 0.5, 3},
		},
		{
			name:   "frequency counts occurrences, presence once",
			p:      Params{RepeatPenalty: 1, RepeatLastN: 64, FrequencyPenalty: 0.5, PresencePenalty: 0.25},
			accept: []int32{2, 2, 2, 4},
			want:   []float32{2, -2, 1 - 1.5 - 0.25, 0.5, 3 - 0.5 - 0.25},
		},
		{
			name:   "window forgets old tokens",
			p:      Params{RepeatPenalty: 1, RepeatLastN: 2, FrequencyPenalty: 1},
			accept: []int32{0, 0, 3, 4},
			want:   []float32{2, -2, 1, -0.5, 2},
		},
		{
			name:   "whole history",
			p:      Params{RepeatPenalty: 1, RepeatLastN: -1, FrequencyPenalty: 1},
			accept: []int32{0, 0, 3, 4, 0},
			want:   []float32{-1, -2, 1, -0.5, 2},
		},
		{
			name:   "window zero disables",
			p:      Params{RepeatPenalty: 3, RepeatLastN: 0, FrequencyPenalty: 1},
			accept: []int32{0, 1},
			want:   logits,
		},
		{
			name:   "out of range tokens ignored",
			p:      Params{RepeatPenalty: 1, RepeatLastN: 4, PresencePenalty: 1},
			accept: []int32{-1, 99, 3},
			want:   []float32{2, -2, 1, -0.5, 3},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.TopP = 1
			s := mustNew(t, tc.p, len(logits))
			for _, a := range tc.accept {
				s.Accept(a)
			}
			for round := range 2 { // a second pass checks the counts survive the marking
				c, _ := s.prepare(logits, nil)
				got := make([]float32, len(c))
				for _, x := range c {
					got[x.id] = x.logit
				}
				for i := range got {
					if math.Abs(float64(got[i]-tc.want[i])) > 1e-6 {
						t.Fatalf("round %d: penalised logits %v, want %v", round, got, tc.want)
					}
				}
			}
			s.Reset()
			c, _ := s.prepare(logits, nil)
			for _, x := range c {
				if x.logit != logits[x.id] {
					t.Fatalf("after Reset token %d still penalised: %v", x.id, x.logit)
				}
			}
		})
	}
}

func TestSampleKeepsLogits(t *testing.T) {
	logits := randomLogits(3, 1000)
	orig := slices.Clone(logits)
	p := DefaultParams()
	p.RepeatPenalty, p.FrequencyPenalty = 1.3, 0.2
	s := mustNew(t, p, len(logits))
	for i := range 50 {
		s.Accept(int32(i))
		s.Sample(logits)
	}
	if !slices.Equal(logits, orig) {
		t.Fatal("Sample modified its input")
	}
}

func drawSeq(t *testing.T, s *Sampler, logits []float32, n int) []int32 {
	t.Helper()
	out := make([]int32, n)
	for i := range out {
		out[i] = s.Sample(logits)
		s.Accept(out[i])
	}
	return out
}

func TestSeeds(t *testing.T) {
	logits := randomLogits(11, 2000)
	p := DefaultParams()
	p.Temperature, p.TopK, p.RepeatPenalty = 1.5, 200, 1.1
	p.Seed = 1
	a := drawSeq(t, mustNew(t, p, len(logits)), logits, 100)
	b := drawSeq(t, mustNew(t, p, len(logits)), logits, 100)
	if !slices.Equal(a, b) {
		t.Fatal("same seed gave different sequences")
	}
	p.Seed = 2
	c := drawSeq(t, mustNew(t, p, len(logits)), logits, 100)
	if slices.Equal(a, c) {
		t.Fatal("different seeds gave the same sequence")
	}
	s := mustNew(t, p, len(logits))
	first := drawSeq(t, s, logits, 100)
	s.Reset()
	if again := drawSeq(t, s, logits, 100); !slices.Equal(first, again) {
		t.Fatal("Reset did not restart the sequence")
	}
}

// TestDistribution draws many tokens with a fixed seed and compares the frequencies with the
// distribution the chain should produce. With 200000 draws the standard error of each frequency
// is below 0.0012, so a tolerance of 0.006 is about five standard errors.
func TestDistribution(t *testing.T) {
	probs := []float64{0.1, 0.2, 0.3, 0.4}
	pow := func(e float64) []float64 {
		out := make([]float64, len(probs))
		var z float64
		for i, p := range probs {
			out[i] = math.Pow(p, e)
			z += out[i]
		}
		for i := range out {
			out[i] /= z
		}
		return out
	}
	tests := []struct {
		name string
		mod  func(*Params)
		want []float64
	}{
		{name: "temperature 1", mod: func(p *Params) {}, want: probs},
		{name: "temperature 0.5 squares", mod: func(p *Params) { p.Temperature = 0.5 }, want: pow(2)},
		{name: "temperature 2 roots", mod: func(p *Params) { p.Temperature = 2 }, want: pow(0.5)},
		{name: "top-k renormalises", mod: func(p *Params) { p.TopK = 2 }, want: []float64{0, 0, 3.0 / 7, 4.0 / 7}},
	}
	const draws = 200000
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, logits := seededOver(t, 1234, tc.mod, probs)
			counts := make([]int, len(probs))
			for range draws {
				counts[s.Sample(logits)]++
			}
			for i, c := range counts {
				if f := float64(c) / draws; math.Abs(f-tc.want[i]) > 0.006 {
					t.Errorf("token %d: frequency %.4f, want %.4f", i, f, tc.want[i])
				}
			}
		})
	}
}

func TestInfiniteLogit(t *testing.T) {
	inf := float32(math.Inf(1))
	s := mustNew(t, DefaultParams(), 4)
	for range 20 {
		if got := s.Sample([]float32{1, inf, 2, inf}); got != 1 {
			t.Fatalf("Sample = %d, want the first +Inf token 1", got)
		}
	}
}

func TestShortAndLongRows(t *testing.T) {
	s := mustNew(t, DefaultParams(), 8)
	if got := s.Sample([]float32{0, 10}); got != 1 {
		t.Fatalf("short row: Sample = %d, want 1", got)
	}
	long := make([]float32, 20)
	long[17] = 50
	if got := s.Sample(long); got != 17 {
		t.Fatalf("long row: Sample = %d, want 17", got)
	}
}

func TestSampleAllocs(t *testing.T) {
	logits := randomLogits(5, 32000)
	tests := []struct {
		name string
		mod  func(*Params)
	}{
		{name: "default", mod: func(p *Params) {}},
		{name: "greedy", mod: func(p *Params) { p.Temperature = 0 }},
		{name: "top-p only", mod: func(p *Params) { p.TopK = 0; p.MinP = 0 }},
		{name: "penalties", mod: func(p *Params) { p.RepeatPenalty = 1.1; p.FrequencyPenalty = 0.1; p.IgnoreTokens = []int32{2} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			tc.mod(&p)
			s := mustNew(t, p, len(logits))
			for i := range 64 {
				s.Accept(int32(i * 7))
			}
			s.Sample(logits)
			if n := testing.AllocsPerRun(20, func() { s.Sample(logits) }); n != 0 {
				t.Fatalf("Sample allocates %.1f times per call", n)
			}
		})
	}
}

// TestPickSaysWhy checks that Pick agrees with Sample and names the reason when no token can be
// chosen, at every temperature (greedy takes a separate path).
func TestPickSaysWhy(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		name    string
		ignore  []int32
		logits  []float32
		want    int32
		wantErr string
	}{
		{name: "a token", logits: []float32{1, 3, 2}, want: 1},
		{name: "NaN beside a number", logits: []float32{nan, nan, 2}, want: 2},
		{name: "all NaN", logits: []float32{nan, nan, nan}, want: -1, wantErr: "no token can be sampled: NaN logits"},
		{name: "NaN where not ignored", ignore: []int32{2}, logits: []float32{nan, nan, 5}, want: -1, wantErr: "no token can be sampled: NaN logits"},
		{name: "all ignored", ignore: []int32{0, 1, 2}, logits: []float32{1, nan, 2}, want: -1, wantErr: "every token of the vocabulary is ignored"},
		{name: "empty row", logits: []float32{}, want: -1, wantErr: "logits row is empty"},
	}
	for _, tc := range tests {
		for _, temp := range []float32{0, 0.8} {
			t.Run(fmt.Sprintf("%s/temp %v", tc.name, temp), func(t *testing.T) {
				s := mustNew(t, withIgnore(onlyParams(temp), tc.ignore...), 3)
				got, err := s.Pick(tc.logits)
				if got != tc.want {
					t.Fatalf("Pick = %d, want %d", got, tc.want)
				}
				if tc.wantErr == "" {
					if err != nil {
						t.Fatalf("Pick error %v", err)
					}
					return
				}
				if !errors.Is(err, ErrNoToken) || !strings.HasPrefix(err.Error(), "no token can be sampled: ") || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Pick error %v, want ErrNoToken saying %q", err, tc.wantErr)
				}
				// Only the request's own ignore list is its fault; NaN is the model's, an empty row the caller's.
				var re *RequestError
				if isReq, want := errors.As(err, &re), len(tc.logits) > 0 && len(tc.ignore) == len(tc.logits); isReq != want {
					t.Fatalf("Pick error %v: a *RequestError: %v, want %v", err, isReq, want)
				}
			})
		}
	}
}

// TestValidateNamesTheParameter: a range error is a *ParamError naming the parameter as
// llama.cpp's API does, which the server turns into the JSON field and the CLI into the flag.
func TestValidateNamesTheParameter(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Params)
		want string
	}{
		{name: "temperature", mod: func(p *Params) { p.Temperature = -0.5 }, want: "temperature"},
		{name: "top_p", mod: func(p *Params) { p.TopP = 1.5 }, want: "top_p"},
		{name: "repeat_last_n", mod: func(p *Params) { p.RepeatLastN = -2 }, want: "repeat_last_n"},
		{name: "logit_bias", mod: func(p *Params) { p.LogitBias = map[int32]float32{1: -200} }, want: "logit_bias"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParams()
			tc.mod(&p)
			var pe *ParamError
			if err := p.Validate(10); !errors.As(err, &pe) || pe.Name != tc.want {
				t.Fatalf("Validate: %v, want a ParamError naming %s", err, tc.want)
			}
		})
	}
	p := DefaultParams()
	p.IgnoreTokens = []int32{50000}
	if err := p.Validate(0); err != nil {
		t.Fatalf("token ids are not checked without a vocabulary size: %v", err)
	}
}
