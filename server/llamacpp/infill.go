package llamacpp

import (
	"context"
	"encoding/json"
	"net/http"
	"ubatch/server"
)

// maxInfillChunks bounds input_extra: each chunk costs a tokenization and a file-separator
// header, and editors send a handful of neighbouring files.
const maxInfillChunks = 256

// infillRequest is the body of llama-server's POST /infill (editors' fill-in-the-middle, e.g.
// llama.vim): the code before and after the cursor, optional chunks of other files, optional
// text already typed after the prefix, and /completion's sampling fields; the answer is
// /completion's.
type infillRequest struct {
	server.SamplingFields
	InputPrefix  *string              `json:"input_prefix"`
	InputSuffix  *string              `json:"input_suffix"`
	InputExtra   []server.InfillChunk `json:"input_extra"`
	Prompt       *string              `json:"prompt"` // text after the prefix, before the cursor's middle
	Stream       bool                 `json:"stream"`
	ReturnTokens bool                 `json:"return_tokens"`
	NProbs       int                  `json:"n_probs"`
}

func (*infillRequest) Supports(field string) bool { return field == "n_probs" }

func (s *api) handleInfill(w http.ResponseWriter, r *http.Request) {
	s.ServeCompletion(w, r, &infillRequest{})
}

func (req *infillRequest) Prepare(ctx context.Context, srv *server.Server) (server.GenParams, [][]int32, server.Reply, error) {
	s := &api{srv}
	v := s.Config().Model.Vocab
	if !v.FIM().HasInfill() {
		return server.GenParams{}, nil, nil, &server.APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "infill_unsupported",
			Message: "this model cannot fill in the middle: its vocabulary has no FIM prefix, suffix and middle tokens " +
				"(tokenizer.ggml.fim_pre_token_id, fim_suf_token_id, fim_mid_token_id, or tokens such as <|fim_prefix|>)"}
	}
	in, err := req.input()
	if err != nil {
		return server.GenParams{}, nil, nil, err
	}
	nPredict := 0
	if req.NPredict != nil {
		nPredict = max(*req.NPredict, 0)
	}
	if err := s.CheckText("prompt", len(in.Prompt)); err != nil {
		return server.GenParams{}, nil, nil, err
	}
	in.Clip(s.TextBound())
	lim := s.Config().Engine.Limits()
	prompt := server.BuildInfill(v, in, lim.NBatch, lim.NCtxSeq, nPredict)
	raw, err := json.Marshal(prompt)
	if err != nil {
		return server.GenParams{}, nil, nil, server.InternalError(err)
	}
	// The rest is /completion's, over the prompt's token ids.
	lr := &llamaCompletionRequest{SamplingFields: req.SamplingFields, Prompt: raw, Stream: req.Stream,
		ReturnTokens: req.ReturnTokens, NProbs: req.NProbs}
	return lr.Prepare(ctx, srv)
}

// input checks the fields llama-server requires: input_prefix and input_suffix (either may be
// empty), input_extra's chunks with a text each (filename optional) and at most
// maxInfillChunks of them.
func (req *infillRequest) input() (server.InfillInput, error) {
	var in server.InfillInput
	if req.InputPrefix == nil {
		return in, server.BadRequest("input_prefix", "input_prefix is required (the text before the cursor; it may be empty)")
	}
	if req.InputSuffix == nil {
		return in, server.BadRequest("input_suffix", "input_suffix is required (the text after the cursor; it may be empty)")
	}
	if len(req.InputExtra) > maxInfillChunks {
		return in, server.BadRequest("input_extra", "input_extra has %d chunks, at most %d are allowed", len(req.InputExtra), maxInfillChunks)
	}
	for i, c := range req.InputExtra {
		if c.Text == nil {
			return in, server.BadRequest("input_extra", "input_extra[%d] has no text: each chunk is {\"filename\": string, \"text\": string}", i)
		}
	}
	in.Prefix, in.Suffix, in.Extra = *req.InputPrefix, *req.InputSuffix, req.InputExtra
	if req.Prompt != nil {
		in.Prompt = *req.Prompt
	}
	return in, nil
}
