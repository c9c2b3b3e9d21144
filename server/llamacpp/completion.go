package llamacpp

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"

	"ubatch/engine"
	"ubatch/sample"
	"ubatch/server"
)

// llamaCompletionRequest is the body of llama.cpp's POST /completion. Absent sampling fields take
// llama.cpp's defaults (sample.DefaultParams); n_predict absent or -1 generates until the end of
// generation or a full context.
type llamaCompletionRequest struct {
	server.SamplingFields
	Prompt       json.RawMessage `json:"prompt"`
	Stream       bool            `json:"stream"`
	ReturnTokens bool            `json:"return_tokens"` // include each chunk's token ids
	NProbs       int             `json:"n_probs"`       // each token's probability and the top n
}

func (*llamaCompletionRequest) Supports(field string) bool { return field == "n_probs" }

// llamaProb is one entry of llama.cpp's completion_probabilities: a generated token with its
// log-probability and the n most likely tokens at that step.
type llamaProb struct {
	ID          int32       `json:"id"`
	Token       string      `json:"token"`
	Logprob     float64     `json:"logprob"`
	Bytes       []int       `json:"bytes"`
	TopLogprobs []llamaProb `json:"top_logprobs,omitempty"`
}

func (s *api) llamaProbs(toks []server.GenToken) []llamaProb {
	out := make([]llamaProb, 0, len(toks))
	for _, t := range toks {
		p := llamaProb{ID: t.ID, Token: s.PieceText(t.ID), Logprob: server.FiniteLogprob(t.Logprob), Bytes: s.PieceBytes(t.ID), TopLogprobs: []llamaProb{}}
		for _, a := range t.Top {
			p.TopLogprobs = append(p.TopLogprobs, llamaProb{ID: a.Token, Token: s.PieceText(a.Token), Logprob: server.FiniteLogprob(a.LogProb), Bytes: s.PieceBytes(a.Token)})
		}
		out = append(out, p)
	}
	return out
}

// llamaTimings is llama.cpp's timings object. prompt_* describe the prompt tokens actually
// computed (cached ones excluded); predicted_* the generation after the first token's prefill.
type llamaTimings struct {
	CacheN              int     `json:"cache_n"`
	PromptN             int     `json:"prompt_n"`
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

// llamaCompletion is one /completion response object: a partial chunk while streaming (Stop
// false), or the final object with the summary fields.
type llamaCompletion struct {
	Content         string        `json:"content"`
	Tokens          []int32       `json:"tokens"`
	Stop            bool          `json:"stop"`
	Model           string        `json:"model,omitempty"`
	TokensPredicted int           `json:"tokens_predicted,omitempty"`
	TokensEvaluated int           `json:"tokens_evaluated,omitempty"`
	TokensCached    int           `json:"tokens_cached,omitempty"`
	StopType        string        `json:"stop_type,omitempty"` // "eos", "limit" or "word"
	StoppingWord    string        `json:"stopping_word,omitempty"`
	Truncated       *bool         `json:"truncated,omitempty"`
	Timings         *llamaTimings `json:"timings,omitempty"`
	Probs           []llamaProb   `json:"completion_probabilities,omitempty"`
}

func (s *api) handleLlamaCompletion(w http.ResponseWriter, r *http.Request) {
	s.ServeCompletion(w, r, &llamaCompletionRequest{})
}

func (req *llamaCompletionRequest) Prepare(ctx context.Context, srv *server.Server) (server.GenParams, [][]int32, server.Reply, error) {
	s := &api{srv}
	g, prompt, err := s.llamaParams(ctx, req)
	if err != nil {
		return g, nil, nil, err
	}
	return g, [][]int32{prompt}, &llamaReply{s: s, g: g}, nil
}

// llamaParams validates a /completion request and tokenizes its prompt.
func (s *api) llamaParams(ctx context.Context, req *llamaCompletionRequest) (server.GenParams, []int32, error) {
	g, err := req.Params(s.Defaults(sample.DefaultParams()), s.Config().Model.Vocab.EOG(), s.Config().Model.Vocab.VocabSize())
	if err != nil {
		return g, nil, err
	}
	g.KeepTokens, g.Stream = req.ReturnTokens, req.Stream
	if req.NProbs < 0 || req.NProbs > server.MaxTopLogprobs {
		return g, nil, server.BadRequest("n_probs", "n_probs must be in [0, %d], got %d", server.MaxTopLogprobs, req.NProbs)
	}
	g.Logprobs, g.TopLogprobs = req.NProbs > 0, req.NProbs
	if err := s.Constrain(ctx, &g, &req.SamplingFields, nil); err != nil {
		return g, nil, err
	}
	inputs, err := server.ParsePrompts("prompt", req.Prompt)
	if err != nil {
		return g, nil, err
	}
	if len(inputs) != 1 {
		return g, nil, server.BadRequest("prompt", "/completion takes one prompt, got %d", len(inputs))
	}
	prompt, err := s.PromptTokens("prompt", inputs[0])
	return g, prompt, err
}

// llamaReply words a generation as llama.cpp's /completion does: one object per chunk, the
// stop:true summary last, and no [DONE].
type llamaReply struct {
	s *api
	g server.GenParams
}

func (l *llamaReply) content(text string, toks []server.GenToken) llamaCompletion {
	c := llamaCompletion{Content: text, Tokens: tokenIDs(toks)}
	if l.g.Logprobs {
		c.Probs = l.s.llamaProbs(toks)
	}
	return c
}

func (l *llamaReply) Chunk(sse *server.SSEWriter, ev server.SeqEvent) error {
	if !ev.Done {
		return sse.Send(l.content(ev.Text, ev.Tokens))
	}
	if ev.Text != "" {
		// The last text goes out in its own chunk so that the final object stays a summary.
		if err := sse.Send(l.content(ev.Text, ev.Tokens)); err != nil {
			return err
		}
	}
	final := l.s.llamaFinal(ev.Finish, ev.StopWord, ev.Usage)
	final.Tokens = []int32{} // the tokens went out with the text
	return sse.Send(final)
}

func (l *llamaReply) End(*server.SSEWriter, server.UsageJSON) error { return nil }

func (l *llamaReply) Whole(res []*server.ChoiceResult, _ server.UsageJSON) any {
	c := res[0]
	final := l.s.llamaFinal(c.Finish, c.StopWord, c.Usage)
	final.Content = c.Text.String()
	final.Tokens = tokenIDs(c.Tokens)
	if l.g.Logprobs {
		final.Probs = l.s.llamaProbs(c.Tokens)
	}
	return final
}

func tokenIDs(toks []server.GenToken) []int32 {
	ids := make([]int32, len(toks))
	for i, t := range toks {
		ids[i] = t.ID
	}
	return ids
}

// llamaFinal builds the stop:true summary object. Its timings come from the engine's time stamps
// (engine.Usage.PromptTime, GenerationTime), taken where the work happened: the handler reads the
// stream in bursts, after the tokens were made.
func (s *api) llamaFinal(finish, stopWord string, u engine.Usage) llamaCompletion {
	stopType := "limit"
	switch {
	case stopWord != "":
		stopType = "word"
	case finish == "stop":
		stopType = "eos"
	}
	computed := u.PromptTokens - u.CachedTokens
	promptTime, genTime := u.PromptTime(), u.GenerationTime()
	t := &llamaTimings{CacheN: u.CachedTokens, PromptN: computed, PromptMS: server.Millis(promptTime),
		PredictedN: u.CompletionTokens, PredictedMS: server.Millis(genTime)}
	if computed > 0 && promptTime > 0 {
		t.PromptPerTokenMS = t.PromptMS / float64(computed)
		t.PromptPerSecond = float64(computed) / promptTime.Seconds()
	}
	if u.CompletionTokens > 0 && genTime > 0 {
		t.PredictedPerTokenMS = t.PredictedMS / float64(u.CompletionTokens)
		t.PredictedPerSecond = float64(u.CompletionTokens) / genTime.Seconds()
	}
	f := false
	return llamaCompletion{
		Stop: true, Model: s.Config().ModelID, TokensPredicted: u.CompletionTokens, TokensEvaluated: u.PromptTokens,
		TokensCached: u.CachedTokens, StopType: stopType, StoppingWord: stopWord, Truncated: &f, Timings: t,
	}
}

// tokenizeRequest is the body of POST /tokenize: llama.cpp's (content) or vLLM's (prompt or
// messages: vllmTokenizeFields, tokenize_vllm.go).
type tokenizeRequest struct {
	Content      *string `json:"content"`
	AddSpecial   bool    `json:"add_special"`
	ParseSpecial *bool   `json:"parse_special"` // default true, as in llama.cpp
	WithPieces   bool    `json:"with_pieces"`
	vllmTokenizeFields
}

// tokenPiece is a token with its text: a string when the piece is valid UTF-8, else its bytes.
type tokenPiece struct {
	ID    int32 `json:"id"`
	Piece any   `json:"piece"`
}

func (s *api) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	release, err := s.DecodeParsed(w, r, &req)
	if err != nil {
		server.WriteError(w, err)
		return
	}
	defer release() // (the answer is small beside the text)
	if req.isVLLM() {
		s.vllmTokenize(w, &req)
		return
	}
	if req.Content == nil {
		server.WriteError(w, server.BadRequest("content", "content is required (or vLLM's prompt or messages)"))
		return
	}
	parse := req.ParseSpecial == nil || *req.ParseSpecial
	v := s.Config().Model.Vocab
	toks := v.Encode(*req.Content, req.AddSpecial, parse)
	if !req.WithPieces {
		server.WriteJSON(w, http.StatusOK, map[string]any{"tokens": append([]int32{}, toks...)})
		return
	}
	out := make([]tokenPiece, len(toks))
	for i, t := range toks {
		p := v.Piece(t)
		out[i].ID = t
		if utf8.Valid(p) {
			out[i].Piece = string(p)
		} else {
			out[i].Piece = s.PieceBytes(t)
		}
	}
	server.WriteJSON(w, http.StatusOK, map[string]any{"tokens": out})
}

// detokenizeRequest is the body of POST /detokenize. llama.cpp's and vLLM's are both tokens;
// vLLM's names the model (its clients always do, llama.cpp's do not), and its answer is
// {"prompt"} instead of llama.cpp's {"content"}.
type detokenizeRequest struct {
	Tokens []int32 `json:"tokens"`
	Model  *string `json:"model"`
}

func (s *api) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	if err := server.DecodeBody(w, r, s.Config().MaxBodyBytes, &req); err != nil {
		server.WriteError(w, err)
		return
	}
	v := s.Config().Model.Vocab
	for _, t := range req.Tokens {
		if t < 0 || int(t) >= v.VocabSize() {
			server.WriteError(w, server.BadRequest("tokens", "token id %d is outside the vocabulary [0, %d)", t, v.VocabSize()))
			return
		}
	}
	key := "content"
	if req.Model != nil {
		key = "prompt"
	}
	server.WriteJSON(w, http.StatusOK, map[string]string{key: strings.ToValidUTF8(v.Decode(req.Tokens), "\uFFFD")})
}
