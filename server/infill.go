package server

import (
	"context"
	"encoding/json"
	"net/http"

	"ubatch/tokenizer"
)

// maxInfillChunks bounds input_extra: each chunk costs a tokenization and a file-separator
// header, and editors send a handful of neighbouring files.
const maxInfillChunks = 256

// infillRequest is the body of llama-server's POST /infill (editors' fill-in-the-middle, e.g.
// llama.vim): the code before and after the cursor, optional chunks of other files, optional
// text already typed after the prefix, and /completion's sampling fields; the answer is
// /completion's.
type infillRequest struct {
	SamplingFields
	InputPrefix  *string       `json:"input_prefix"`
	InputSuffix  *string       `json:"input_suffix"`
	InputExtra   []InfillChunk `json:"input_extra"`
	Prompt       *string       `json:"prompt"` // text after the prefix, before the cursor's middle
	Stream       bool          `json:"stream"`
	ReturnTokens bool          `json:"return_tokens"`
	NProbs       int           `json:"n_probs"`
}

// InfillChunk is one input_extra item: a file's name and some of its text.
type InfillChunk struct {
	Filename *string `json:"filename"`
	Text     *string `json:"text"`
}

func (*infillRequest) Supports(field string) bool { return field == "n_probs" }

func (s *Server) handleInfill(w http.ResponseWriter, r *http.Request) {
	s.ServeCompletion(w, r, &infillRequest{})
}

func (req *infillRequest) Prepare(ctx context.Context, s *Server) (GenParams, [][]int32, Reply, error) {
	v := s.cfg.Model.Vocab
	if !v.FIM().HasInfill() {
		return GenParams{}, nil, nil, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "infill_unsupported",
			Message: "this model cannot fill in the middle: its vocabulary has no FIM prefix, suffix and middle tokens " +
				"(tokenizer.ggml.fim_pre_token_id, fim_suf_token_id, fim_mid_token_id, or tokens such as <|fim_prefix|>)"}
	}
	in, err := req.input()
	if err != nil {
		return GenParams{}, nil, nil, err
	}
	nPredict := 0
	if req.NPredict != nil {
		nPredict = max(*req.NPredict, 0)
	}
	if err := s.CheckText("prompt", len(in.Prompt)); err != nil {
		return GenParams{}, nil, nil, err
	}
	in.Clip(s.TextBound())
	lim := s.cfg.Engine.Limits()
	prompt := BuildInfill(v, in, lim.NBatch, lim.NCtxSeq, nPredict)
	raw, err := json.Marshal(prompt)
	if err != nil {
		return GenParams{}, nil, nil, InternalError(err)
	}
	// The rest is /completion's, over the prompt's token ids.
	lr := &llamaCompletionRequest{SamplingFields: req.SamplingFields, Prompt: raw, Stream: req.Stream,
		ReturnTokens: req.ReturnTokens, NProbs: req.NProbs}
	return lr.Prepare(ctx, s)
}

// InfillInput is a checked /infill request's text.
type InfillInput struct {
	Prefix, Suffix, Prompt string
	Extra                  []InfillChunk // each with Text set
}

// input checks the fields llama-server requires: input_prefix and input_suffix (either may be
// empty), input_extra's chunks with a text each (filename optional) and at most
// maxInfillChunks of them.
func (req *infillRequest) input() (InfillInput, error) {
	var in InfillInput
	if req.InputPrefix == nil {
		return in, BadRequest("input_prefix", "input_prefix is required (the text before the cursor; it may be empty)")
	}
	if req.InputSuffix == nil {
		return in, BadRequest("input_suffix", "input_suffix is required (the text after the cursor; it may be empty)")
	}
	if len(req.InputExtra) > maxInfillChunks {
		return in, BadRequest("input_extra", "input_extra has %d chunks, at most %d are allowed", len(req.InputExtra), maxInfillChunks)
	}
	for i, c := range req.InputExtra {
		if c.Text == nil {
			return in, BadRequest("input_extra", "input_extra[%d] has no text: each chunk is {\"filename\": string, \"text\": string}", i)
		}
	}
	in.Prefix, in.Suffix, in.Extra = *req.InputPrefix, *req.InputSuffix, req.InputExtra
	if req.Prompt != nil {
		in.Prompt = *req.Prompt
	}
	return in, nil
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
