package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"math"
	"net/http"
	"time"
)

// openAIMaxTokensDefault is max_tokens of /v1/completions when absent, as in OpenAI's API.
const openAIMaxTokensDefault = 16

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// openAIFields are the request fields /v1/completions and /v1/chat/completions share.
type openAIFields struct {
	Model               string          `json:"model"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	Logprobs            json.RawMessage `json:"logprobs"`
	User                string          `json:"user"`
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	SamplingFields
	openAIFields
	Prompt json.RawMessage `json:"prompt"`
	Echo   bool            `json:"echo"`
}

// completionLogprobs is the legacy completions logprobs object: parallel lists, one entry per
// token. text_offset is the token's byte offset in the choice's text.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type completionChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// openAIResponse is the response object of both OpenAI routes, and of their stream chunks; C is
// the route's choice type.
type openAIResponse[C any] struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []C    `json:"choices"`
	// Usage is a *UsageJSON in responses and final chunks, JSON null in the other chunks of a
	// stream that asked for usage, and omitted otherwise (OpenAI's convention).
	Usage any `json:"usage,omitempty"`
}

type completionResponse = openAIResponse[completionChoice]

// jsonNull is the usage value of non-final chunks when the client asked for usage.
const jsonNull = RawJSON("null")

// RawJSON is JSON text embedded as is.
type RawJSON string

func (r RawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }

// openAIReply is what the replies of both OpenAI routes share: the response envelope, and the
// end of a stream (the usage chunk when asked for, then [DONE]).
type openAIReply[C any] struct {
	resp         openAIResponse[C]
	includeUsage bool
}

func newOpenAIReply[C any](s *Server, id, object string, f *openAIFields) openAIReply[C] {
	o := openAIReply[C]{resp: openAIResponse[C]{ID: id + rand.Text(), Object: object, Created: time.Now().Unix(), Model: s.cfg.ModelID}}
	if f.Stream && f.StreamOptions != nil && f.StreamOptions.IncludeUsage {
		o.includeUsage, o.resp.Usage = true, jsonNull
	}
	return o
}

// send sends one chunk with choices.
func (o *openAIReply[C]) send(sse *SSEWriter, choices ...C) error {
	o.resp.Choices = choices
	return sse.Send(o.resp)
}

func (o *openAIReply[C]) End(sse *SSEWriter, u UsageJSON) error {
	if o.includeUsage {
		o.resp.Choices, o.resp.Usage = []C{}, &u // choices [], not null
		if err := sse.Send(o.resp); err != nil {
			return err
		}
	}
	return sse.done()
}

// response is the non-streaming response with choices.
func (o *openAIReply[C]) response(choices []C, u UsageJSON) any {
	o.resp.Choices, o.resp.Usage = choices, &u
	return o.resp
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.ServeCompletion(w, r, &completionRequest{})
}

func (req *completionRequest) Prepare(ctx context.Context, s *Server) (GenParams, [][]int32, Reply, error) {
	g, prompts, err := s.completionParams(ctx, req)
	if err != nil {
		return g, nil, nil, err
	}
	return g, prompts, &completionReply{openAIReply: newOpenAIReply[completionChoice](s, "cmpl-", "text_completion", &req.openAIFields), s: s, g: g}, nil
}

// completionReply words a generation as /v1/completions does.
type completionReply struct {
	openAIReply[completionChoice]
	s *Server
	g GenParams
}

func (c *completionReply) choice(index int, text string, toks []GenToken) completionChoice {
	ch := completionChoice{Text: text, Index: index}
	if c.g.Logprobs {
		ch.Logprobs = c.s.completionLogprobs(toks)
	}
	return ch
}

func (c *completionReply) Chunk(sse *SSEWriter, ev SeqEvent) error {
	ch := c.choice(ev.index, ev.Text, ev.Tokens)
	if ev.Done {
		ch.FinishReason = &ev.Finish
	}
	return c.send(sse, ch)
}

func (c *completionReply) Whole(res []*ChoiceResult, u UsageJSON) any {
	choices := make([]completionChoice, len(res))
	for i, r := range res {
		choices[i] = c.choice(i, r.Text.String(), r.Tokens)
		choices[i].FinishReason = &r.Finish
	}
	return c.response(choices, u)
}

// completionParams validates a /v1/completions request and tokenizes its prompts.
func (s *Server) completionParams(ctx context.Context, req *completionRequest) (GenParams, [][]int32, error) {
	g, err := req.Params(s.Defaults(OpenAIDefaults()), s.cfg.Model.Vocab.EOG(), s.cfg.Model.Vocab.VocabSize())
	if err != nil {
		return g, nil, err
	}
	if req.NPredict == nil {
		g.MaxTokens = openAIMaxTokensDefault
	}
	if err := g.setMaxTokens(req.MaxTokens, req.MaxCompletionTokens); err != nil {
		return g, nil, err
	}
	g.Stream = req.Stream
	if req.Echo {
		return g, nil, BadRequest("echo", "echo is not supported")
	}
	if g.Logprobs, g.TopLogprobs, err = parseLogprobs(req.Logprobs); err != nil {
		return g, nil, err
	}
	if err := s.Constrain(ctx, &g, &req.SamplingFields, nil); err != nil {
		return g, nil, err
	}
	inputs, err := ParsePrompts("prompt", req.Prompt)
	if err != nil {
		return g, nil, err
	}
	if err := g.setN(req.N, len(inputs), s.maxN()); err != nil {
		return g, nil, err
	}
	prompts := make([][]int32, len(inputs))
	for i, in := range inputs {
		if prompts[i], err = s.PromptTokens("prompt", in); err != nil {
			return g, nil, err
		}
	}
	return g, prompts, nil
}

// PromptTokens tokenizes a text prompt as llama.cpp's server does (special tokens added as the
// model asks, special-token text parsed) or checks a token-id prompt against the vocabulary.
func (s *Server) PromptTokens(field string, in PromptInput) ([]int32, error) {
	v := s.cfg.Model.Vocab
	if in.isText {
		if in.text == "" {
			return nil, BadRequest(field, "%s is empty", field)
		}
		return s.Encode(field, in.text, true, true)
	}
	if len(in.tokens) == 0 {
		return nil, BadRequest(field, "%s is an empty list of tokens", field)
	}
	for _, t := range in.tokens {
		if t < 0 || int(t) >= v.VocabSize() {
			return nil, BadRequest(field, "token id %d is outside the vocabulary [0, %d)", t, v.VocabSize())
		}
	}
	return in.tokens, nil
}

func (s *Server) completionLogprobs(toks []GenToken) *completionLogprobs {
	lp := &completionLogprobs{
		Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{},
	}
	for _, t := range toks {
		lp.Tokens = append(lp.Tokens, s.PieceText(t.ID))
		lp.TokenLogprobs = append(lp.TokenLogprobs, FiniteLogprob(t.Logprob))
		top := make(map[string]float64, len(t.Top))
		for _, a := range t.Top {
			top[s.PieceText(a.Token)] = FiniteLogprob(a.LogProb)
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, t.offset)
	}
	return lp
}

// PieceText is the text of one token as logprobs report it (a byte token that is part of a
// multi-byte character is not valid UTF-8 alone; JSON encoding then shows U+FFFD, while the chat
// API's bytes field keeps the exact bytes).
func (s *Server) PieceText(id int32) string { return string(s.cfg.Model.Vocab.Piece(id)) }

// FiniteLogprob maps -Inf (a token the sampler could never pick) to OpenAI's -9999, since JSON has
// no infinities.
func FiniteLogprob(v float32) float64 {
	if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
		return -9999
	}
	return float64(v)
}
