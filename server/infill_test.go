package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"ubatch/tokenizer"
)

func strp(s string) *string { return &s }

// cat joins token lists.
func cat(parts ...[]int32) []int32 { return slices.Concat(parts...) }

// TestInfillPrompt spells out llama-server's repo-level layout over the FIM vocabulary: BOS,
// [REP]myproject, each chunk under [SEP]name ("tmp" when unnamed), [SEP]filename, then
// [PRE]prefix prompt [SUF]suffix [MID]; and its cuts: the prefix keeps its last 3/4 batch, the
// suffix its first quarter batch less the prompt and two, the extra context its last
// nCtx - nBatch - 2·nPredict tokens.
func TestInfillPrompt(t *testing.T) {
	e := synthEnv(t, synthOptions{fim: true})
	v := e.model.Vocab
	f := v.FIM()
	enc := func(s string) []int32 { return v.Encode(s, false, false) }
	in := InfillInput{Prefix: "func a(", Suffix: ") {}", Prompt: "b",
		Extra: []InfillChunk{{Filename: strp("x.go"), Text: strp("package x")}, {Text: strp("var y")}}}
	want := cat([]int32{v.BOS(), f.Rep}, enc("myproject\n"), []int32{f.Sep}, enc("x.go\n"), enc("package x"),
		[]int32{f.Sep}, enc("tmp\n"), enc("var y"), []int32{f.Sep}, enc("filename\n"),
		[]int32{f.Pre}, enc("func a("), v.Encode("b", false, true), []int32{f.Suf}, enc(") {}"), []int32{f.Mid})
	if got := BuildInfill(v, in, 256, 1024, 16); !slices.Equal(got, want) {
		t.Fatalf("prompt\n got %v\nwant %v", got, want)
	}

	long := strings.Repeat("a b c d ", 100)
	toks := enc(long)
	in = InfillInput{Prefix: long, Suffix: long, Prompt: "b", Extra: []InfillChunk{{Filename: strp("f"), Text: &long}}}
	got := BuildInfill(v, in, 64, 200, 10) // prefix 48, suffix 16-2-1 = 13, extra 200-64-20 = 116
	extra := cat([]int32{f.Rep}, enc("myproject\n"), []int32{f.Sep}, enc("f\n"), toks, []int32{f.Sep}, enc("filename\n"))
	want = cat([]int32{v.BOS()}, extra[len(extra)-116:], []int32{f.Pre}, toks[len(toks)-48:], v.Encode("b", false, true),
		[]int32{f.Suf}, toks[:13], []int32{f.Mid})
	if !slices.Equal(got, want) {
		t.Fatalf("cut prompt\n got %v\nwant %v", got, want)
	}

	// Without repository and file-separator tokens, chunks follow llama-server's snippet header.
	var vocab []string
	for id := range v.VocabSize() {
		vocab = append(vocab, v.Token(int32(id)))
	}
	plain, err := tokenizer.New(tokenizer.Vocab{Model: "llama", Tokens: slices.Replace(vocab, int(f.Pad), int(f.Sep)+1, "x1", "x2", "x3"),
		BOS: 1, EOS: 2, UNK: 0, AddBOS: false})
	if err != nil {
		t.Fatal(err)
	}
	plainFIM := tokenizer.FIMTokens{Pre: f.Pre, Suf: f.Suf, Mid: f.Mid, Pad: -1, Rep: -1, Sep: -1}
	if plain.FIM() != plainFIM {
		t.Fatalf("plain FIM %+v", plain.FIM())
	}
	penc := func(s string) []int32 { return plain.Encode(s, false, false) }
	in = InfillInput{Prefix: "p", Suffix: "s", Extra: []InfillChunk{{Filename: strp("x.go"), Text: strp("e")}}}
	want = cat(penc(snippetHeader), penc("e"), []int32{f.Pre}, penc("p"), []int32{f.Suf}, penc("s"), []int32{f.Mid})
	if got := BuildInfill(plain, in, 256, 1024, 0); !slices.Equal(got, want) {
		t.Fatalf("snippet prompt\n got %v\nwant %v", got, want)
	}
}

// TestInfillEndpoint: /infill answers as /completion does over the FIM prompt: the same greedy
// tokens as /completion given that prompt's ids, tokens_evaluated its length; streamed, chunks
// then the stop:true summary.
func TestInfillEndpoint(t *testing.T) {
	e := synthEnv(t, synthOptions{fim: true})
	body := map[string]any{"n_predict": 6, "temperature": 0, "ignore_eos": true, "return_tokens": true,
		"input_prefix": "func a(", "input_suffix": ") {}", "prompt": "b", "input_extra": []map[string]string{{"filename": "x.go", "text": "package x"}}}
	in := InfillInput{Prefix: "func a(", Suffix: ") {}", Prompt: "b", Extra: []InfillChunk{{Filename: strp("x.go"), Text: strp("package x")}}}
	prompt := BuildInfill(e.model.Vocab, in, synthNBatch, synthNCtx, 6)
	var got, ref llamaCompletion
	e.postJSON("/infill", body, http.StatusOK, &got)
	if got.TokensEvaluated != len(prompt) || got.TokensPredicted != 6 || len(got.Tokens) != 6 || !got.Stop {
		t.Fatalf("infill: %+v; want %d prompt tokens", got, len(prompt))
	}
	e.postJSON("/completion", map[string]any{"prompt": prompt, "n_predict": 6, "temperature": 0, "ignore_eos": true, "return_tokens": true}, http.StatusOK, &ref)
	if !slices.Equal(got.Tokens, ref.Tokens) || got.Content != ref.Content || ref.TokensCached == 0 {
		t.Errorf("infill tokens %v %q, /completion over its prompt %v %q (cached %d)", got.Tokens, got.Content, ref.Tokens, ref.Content, ref.TokensCached)
	}

	resp := e.postStream("/infill", body)
	defer resp.Body.Close()
	var streamed []int32
	events := sseEvents(t, resp.Body)
	for i, ev := range events {
		var c llamaCompletion
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		streamed = append(streamed, c.Tokens...)
		if c.Stop != (i == len(events)-1) || (c.Stop && c.TokensEvaluated != len(prompt)) {
			t.Errorf("event %d: %s", i, ev)
		}
	}
	if !slices.Equal(streamed, got.Tokens) {
		t.Errorf("streamed %v, want %v", streamed, got.Tokens)
	}
}

// TestInfillErrors: a model without FIM tokens is a 400 infill_unsupported; the required
// fields, chunk texts and the chunk cap are 400s naming the field.
func TestInfillErrors(t *testing.T) {
	plain := synthEnv(t, synthOptions{})
	var eb errorBody
	plain.postJSON("/infill", map[string]any{"input_prefix": "a", "input_suffix": "b"}, http.StatusBadRequest, &eb)
	if eb.Error.Code == nil || *eb.Error.Code != "infill_unsupported" || !strings.Contains(eb.Error.Message, "FIM") {
		t.Errorf("no FIM tokens: %+v", eb.Error)
	}
	e := synthEnv(t, synthOptions{fim: true})
	many := make([]map[string]string, maxInfillChunks+1)
	for i := range many {
		many[i] = map[string]string{"text": "x"}
	}
	for _, tc := range []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"input_suffix": "b"}, "input_prefix"},
		{map[string]any{"input_prefix": "a"}, "input_suffix"},
		{map[string]any{"input_prefix": "a", "input_suffix": "b", "input_extra": []map[string]string{{"filename": "f"}}}, "input_extra"},
		{map[string]any{"input_prefix": "a", "input_suffix": "b", "input_extra": many}, "input_extra"},
		{map[string]any{"input_prefix": "a", "input_suffix": "b", "prompt": 3}, "prompt"},
		{map[string]any{"input_prefix": "a", "input_suffix": "b", "n_probs": 100}, "n_probs"},
	} {
		var eb errorBody
		e.postJSON("/infill", tc.body, http.StatusBadRequest, &eb)
		if eb.Error.Param == nil || *eb.Error.Param != tc.param {
			t.Errorf("%v: %+v, want param %s", tc.body, eb.Error, tc.param)
		}
	}
}
