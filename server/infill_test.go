package server

import (
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
