package sample

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"ubatch/grammar"
	"ubatch/internal/testdata"
)

// grammarPieces is a small vocabulary: token 0 ends generation, token 1 is a control token.
var grammarPieces = []string{"", "", "{", "}", "\"", "a", "b", ":", ",", " ", "ab", "\"}", "x", "1", "2", "12", "[", "]", "\"a\":", "null", "true"}

func grammarVocab(t testing.TB) *grammar.Vocab {
	t.Helper()
	ps := make([][]byte, len(grammarPieces))
	for i, p := range grammarPieces {
		ps[i] = []byte(p)
	}
	v, err := grammar.NewVocab(ps, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func grammarParams(t testing.TB, temp float32, src string) Params {
	t.Helper()
	g, err := grammar.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	p := onlyParams(temp)
	p.Grammar, p.GrammarVocab = g, grammarVocab(t)
	return p
}

func tokenText(toks []int32) string {
	var sb strings.Builder
	for _, t := range toks {
		sb.WriteString(grammarPieces[t])
	}
	return sb.String()
}

func TestGrammarValidation(t *testing.T) {
	g, err := grammar.Parse(`root ::= "a"`)
	if err != nil {
		t.Fatal(err)
	}
	v := grammarVocab(t)
	tests := []struct {
		name    string
		mod     func(*Params)
		vocab   int
		wantErr string
	}{
		{name: "ok", mod: func(p *Params) { p.Grammar, p.GrammarVocab = g, v }, vocab: len(grammarPieces)},
		{name: "no vocab", mod: func(p *Params) { p.Grammar = g }, vocab: len(grammarPieces), wantErr: "needs GrammarVocab"},
		{name: "vocab alone", mod: func(p *Params) { p.GrammarVocab = v }, vocab: len(grammarPieces), wantErr: "without a Grammar"},
		{name: "size mismatch", mod: func(p *Params) { p.Grammar, p.GrammarVocab = g, v }, vocab: 99, wantErr: "has 21 tokens, the model 99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			tt.mod(&p)
			_, err := New(p, tt.vocab)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("New: %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestGrammarGreedy checks that greedy sampling with a grammar picks the most likely allowed
// token at every step (compared with a brute-force scan over Matcher.Allowed), and ends with
// EOG only when the grammar is complete, even though EOG is the model's favourite throughout.
func TestGrammarGreedy(t *testing.T) {
	src := `root ::= "{" "\"a\":" [0-9]+ "}"`
	p := grammarParams(t, 0, src)
	s := mustNew(t, p, len(grammarPieces))
	check := grammar.NewMatcher(p.Grammar, p.GrammarVocab)
	rng := rand.New(rand.NewPCG(5, 6))
	var toks []int32
	for step := 0; step < 40; step++ {
		logits := randomLogits(rng.Uint64(), len(grammarPieces))
		logits[0] = 50 // EOG first whenever it is allowed
		want, best := int32(-1), float32(math.Inf(-1))
		for tok := range int32(len(logits)) {
			if check.Allowed(tok) && logits[tok] > best {
				want, best = tok, logits[tok]
			}
		}
		got := s.Sample(logits)
		if got != want {
			t.Fatalf("step %d after %q: got %d, want %d", step, tokenText(toks), got, want)
		}
		if err := check.AcceptToken(got); err != nil {
			t.Fatal(err)
		}
		if got == 0 {
			break
		}
		toks = append(toks, got)
	}
	if text := tokenText(toks); !check.Done() || !strings.HasPrefix(text, `{"a":`) || !strings.HasSuffix(text, "}") {
		t.Fatalf("greedy output %q (done %v)", text, check.Done())
	}
	if tok := s.Sample(randomLogits(1, len(grammarPieces))); tok != -1 || s.Err() == nil {
		t.Fatalf("after the end: token %d, err %v", tok, s.Err())
	}
	s.Reset()
	if tok := s.Sample(randomLogits(1, len(grammarPieces))); tok != 2 {
		t.Fatalf("after Reset: token %d, want %q", tok, "{")
	}
}

// TestGrammarSampledOutputIsValid samples many sequences with the default chain (top-k, top-p,
// min-p, temperature) from random logits under a JSON grammar, and checks every finished output
// with encoding/json.
func TestGrammarSampledOutputIsValid(t *testing.T) {
	src := `root ::= value
value ::= "{" ( pair ( "," pair )* )? "}" | "[" ( value ( "," value )* )? "]" | "\"" [ab]* "\"" | [0-9]+ | "null" | "true"
pair ::= "\"" [ab]* "\":" " "? value`
	g, err := grammar.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	finished := 0
	for seed := range uint64(200) {
		p := DefaultParams()
		p.Seed = seed
		p.Grammar, p.GrammarVocab = g, grammarVocab(t)
		if seed%2 == 0 {
			p.Temperature = 1.5
			p.TopK = 0
		}
		s := mustNew(t, p, len(grammarPieces))
		rng := rand.New(rand.NewPCG(seed, 9))
		var toks []int32
		for range 60 {
			logits := randomLogits(rng.Uint64(), len(grammarPieces))
			tok := s.Sample(logits)
			if tok < 0 {
				t.Fatalf("seed %d after %q: %v", seed, tokenText(toks), s.Err())
			}
			s.Accept(tok)
			if tok == 0 {
				finished++
				if text := tokenText(toks); !json.Valid([]byte(text)) {
					t.Fatalf("seed %d: sampled %q, not JSON", seed, text)
				}
				break
			}
			toks = append(toks, tok)
		}
	}
	if finished < 20 {
		t.Fatalf("only %d of 200 sampled outputs finished", finished)
	}
}

// TestGrammarDeadEnds: every dead end the request caused is a *RequestError naming the field at
// fault, so that the server answers 400; NaN logits are not (the model's fault: 500).
func TestGrammarDeadEnds(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		name, src   string
		ignoreEOS   bool
		nanFrom     int // logits from this token id on are NaN (0: none)
		prefix      int // tokens to sample greedily first
		wantErr     string
		param, code string // of the *RequestError; "" = not one
	}{
		{name: "no token spells it", src: `root ::= "{" "é"`, prefix: 1, wantErr: "dead end",
			param: "grammar", code: CodeGrammarDeadEnd},
		{name: "end disabled", src: `root ::= "{"`, prefix: 1, ignoreEOS: true, wantErr: "end of generation is disabled",
			param: "ignore_eos", code: CodeGrammarDeadEnd},
		{name: "NaN logits", src: `root ::= "x"`, nanFrom: 1, wantErr: "NaN logit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := grammarParams(t, 0, tt.src)
			if tt.ignoreEOS {
				p.IgnoreTokens = []int32{0}
			}
			s := mustNew(t, p, len(grammarPieces))
			logits := randomLogits(3, len(grammarPieces))
			if tt.nanFrom > 0 {
				for i := tt.nanFrom; i < len(logits); i++ {
					logits[i] = nan
				}
			}
			for range tt.prefix {
				if tok := s.Sample(logits); tok < 0 {
					t.Fatalf("prefix: %v", s.Err())
				}
			}
			if tok := s.Sample(logits); tok != -1 || s.Err() == nil || !strings.Contains(s.Err().Error(), tt.wantErr) {
				t.Fatalf("got token %d, err %v; want -1 and %q", tok, s.Err(), tt.wantErr)
			}
			var re *RequestError
			switch isReq := errors.As(s.Err(), &re); {
			case tt.param == "" && isReq:
				t.Fatalf("%v is a *RequestError (%s, %s); want the server's fault", s.Err(), re.Param, re.Code)
			case tt.param != "" && !isReq:
				t.Fatalf("%v is not a *RequestError", s.Err())
			case tt.param != "" && (re.Param != tt.param || re.Code != tt.code):
				t.Fatalf("RequestError param %q code %q, want %q %q", re.Param, re.Code, tt.param, tt.code)
			}
		})
	}
}

// TestGrammarBudgetIsRequestError: issue 19's mask attack (many alternatives of nearly any text,
// compiled past the default limits) over a 3000-token vocabulary needs more than the matcher's
// work budget for one mask; sampling then fails at once with a *RequestError on the grammar that
// wraps grammar.ErrBudget (a 400), instead of computing the mask.
func TestGrammarBudgetIsRequestError(t *testing.T) {
	g, err := grammar.Compile(context.Background(), testdata.MaskAttackGBNF(), grammar.Limits{MaxElements: 1 << 21, MaxTime: time.Minute}) // compiling takes 1-2 s on a loaded machine: not what is tested
	if err != nil {
		t.Fatal(err)
	}
	pieces := [][]byte{nil, []byte("!")} // 0 ends generation; 1 is what the model (logit_bias) insists on
	for i := range 3000 {
		pieces = append(pieces, []byte{byte('a' + i%26), byte('a' + i/26%26), byte('a' + i/676)})
	}
	v, err := grammar.NewVocab(pieces, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	p := onlyParams(0)
	p.Grammar, p.GrammarVocab = g, v
	s := mustNew(t, p, len(pieces))
	logits := make([]float32, len(pieces))
	logits[1] = 100 // "!": the grammar refuses it, so the mask is needed
	tok := s.Sample(logits)
	var re *RequestError
	if tok != -1 || !errors.As(s.Err(), &re) || re.Param != "grammar" || re.Code != CodeGrammarTooExpensive ||
		!errors.Is(s.Err(), grammar.ErrBudget) {
		t.Fatalf("Sample = %d, %v; want -1 and a RequestError on the grammar wrapping grammar.ErrBudget", tok, s.Err())
	}
}

// TestGrammarLimitIsRequestError: a matcher that refuses its work (here ErrTooAmbiguous) ends
// sampling with a *RequestError on the grammar that still wraps the matcher's sentinel.
func TestGrammarLimitIsRequestError(t *testing.T) {
	err := grammarLimit(fmt.Errorf("step: %w", grammar.ErrTooAmbiguous))
	if err.Param != "grammar" || err.Code != CodeGrammarTooAmbiguous || !errors.Is(err, grammar.ErrTooAmbiguous) {
		t.Fatalf("grammarLimit(ErrTooAmbiguous) = %+v", err)
	}
	if err := grammarLimit(errors.New("some other limit")); err.Code != CodeGrammarTooExpensive {
		t.Fatalf("grammarLimit(other) code %q, want %q", err.Code, CodeGrammarTooExpensive)
	}
}

func TestGrammarAllocs(t *testing.T) {
	p := grammarParams(t, 0.8, `root ::= "[" ( [0-9]+ ( "," [0-9]+ )* )? "]"`)
	p.TopK = 5
	s := mustNew(t, p, len(grammarPieces))
	logits := randomLogits(4, len(grammarPieces))
	logits[16] = 20 // "["
	s.Sample(logits)
	logits[16] = 0
	logits[13], logits[14] = 20, 19.5 // "1", "2"
	for range 10 {                    // warm the grammar's caches
		s.Sample(logits)
	}
	if n := testing.AllocsPerRun(100, func() { s.Sample(logits) }); n != 0 {
		t.Fatalf("Sample with a grammar allocates %v times per call", n)
	}
}
