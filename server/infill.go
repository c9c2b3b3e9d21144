package server

import (
	"ubatch/tokenizer"
)

// InfillChunk is one input_extra item: a file's name and some of its text.
type InfillChunk struct {
	Filename *string `json:"filename"`
	Text     *string `json:"text"`
}

// InfillInput is a checked /infill request's text.
type InfillInput struct {
	Prefix, Suffix, Prompt string
	Extra                  []InfillChunk // each with Text set
}

// Clip cuts the text that BuildInfill would cut anyway before it is tokenized: of the prefix
// only its last bound bytes can be among the tokens kept (at most a sequence's), of the suffix
// its first, and of the extra context the last chunks within bound bytes (the first kept one
// cut at its start). bound is Server.TextBound: the kept tokens' bytes end boundSlack bytes or
// more before the cut, so tokenizing the cut text keeps the same tokens.
func (in *InfillInput) Clip(bound int) {
	in.Prefix, in.Suffix = lastBytes(in.Prefix, bound), firstBytes(in.Suffix, bound)
	left := bound
	for i := len(in.Extra) - 1; i >= 0; i-- {
		if left <= 0 {
			in.Extra = in.Extra[i+1:]
			return
		}
		if t := *in.Extra[i].Text; len(t) > left {
			short := lastBytes(t, left)
			in.Extra[i].Text = &short
		}
		left -= len(*in.Extra[i].Text)
	}
}

// snippetHeader separates input_extra chunks when the vocabulary has no file-separator token
// (llama-server's text).
const snippetHeader = "\n\n--- snippet ---\n\n"

// BuildInfill lays out a fill-in-the-middle prompt as llama-server does (its repo-level
// pattern, arXiv:2409.12186):
//
//	[BOS] [REP]myproject\n [SEP]file0\n text0 ... [SEP]filename\n [PRE]prefix prompt [SUF]suffix [MID]
//
// where [REP] and [SEP] appear only when the vocabulary has them (without [SEP] each chunk is
// introduced by snippetHeader and the closing "[SEP]filename\n" is left out), a chunk's name
// defaults to "tmp", and the prompt text goes after the prefix. Like llama-server, it fits the
// prefix and suffix in one batch of nBatch tokens (the prefix's last 3/4 of it, the suffix's
// first quarter less the prompt and two tokens) and keeps the last nCtx - nBatch - 2·nPredict
// tokens of the extra context, so the prompt is cut rather than refused. One difference: BOS,
// when the vocabulary adds it, comes first, where llama-server puts the extra context before it.
// Text is tokenized without special tokens, but for the prompt, which /completion's prompts
// parse too.
func BuildInfill(v *tokenizer.Tokenizer, in InfillInput, nBatch, nCtx, nPredict int) []int32 {
	enc := func(s string) []int32 { return v.Encode(s, false, false) }
	fim := v.FIM()
	var extra []int32
	if fim.Rep >= 0 {
		extra = append(append(extra, fim.Rep), enc("myproject\n")...)
	}
	for _, c := range in.Extra {
		if fim.Sep >= 0 {
			name := "tmp"
			if c.Filename != nil {
				name = *c.Filename
			}
			extra = append(append(extra, fim.Sep), enc(name+"\n")...)
		} else {
			extra = append(extra, enc(snippetHeader)...)
		}
		extra = append(extra, enc(*c.Text)...)
	}
	if fim.Sep >= 0 {
		extra = append(append(extra, fim.Sep), enc("filename\n")...)
	}
	prefix, suffix := enc(in.Prefix), enc(in.Suffix)
	prompt := v.Encode(in.Prompt, false, true)
	nPrefix := min(len(prefix), 3*(nBatch/4))
	nSuffix := min(len(suffix), max(0, nBatch/4-(2+len(prompt))))
	nExtra := min(len(extra), max(0, nCtx-nBatch-2*nPredict))

	out := make([]int32, 0, 4+nExtra+nPrefix+len(prompt)+nSuffix)
	if v.AddBOS() {
		out = append(out, v.BOS())
	}
	out = append(out, extra[len(extra)-nExtra:]...)
	out = append(append(out, fim.Pre), prefix[len(prefix)-nPrefix:]...)
	out = append(out, prompt...)
	out = append(append(out, fim.Suf), suffix[:nSuffix]...)
	return append(out, fim.Mid)
}
