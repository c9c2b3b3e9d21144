package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"math"
	"net/http"
	"time"

	"ubatch/engine"
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
	samplingFields
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

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	// Usage is a *usageJSON in responses and final chunks, JSON null in the other chunks of a
	// stream that asked for usage, and omitted otherwise (OpenAI's convention).
	Usage any `json:"usage,omitempty"`
}

// jsonNull is the usage value of non-final chunks when the client asked for usage.
const jsonNull = rawJSON("null")

// rawJSON is JSON text embedded as is.
type rawJSON string

func (r rawJSON) MarshalJSON() ([]byte, error) { return []byte(r), nil }

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, err)
		return
	}
	g, prompts, err := s.completionParams(&req)
	if err != nil {
		writeError(w, err)
		return
	}
	gen, err := s.generate(r.Context(), prompts, g)
	if err != nil {
		writeError(w, err)
		return
	}
	defer gen.cancel()
	resp := completionResponse{ID: "cmpl-" + rand.Text(), Object: "text_completion", Created: time.Now().Unix(), Model: s.cfg.ModelID}
	if !req.Stream {
		res, err := gen.collect(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		usages := make([]engine.Usage, len(res))
		for i, c := range res {
			ch := completionChoice{Text: c.text.String(), Index: i, FinishReason: &c.finish}
			if g.logprobs {
				ch.Logprobs = s.completionLogprobs(c.tokens)
			}
			resp.Choices = append(resp.Choices, ch)
			usages[i] = c.usage
		}
		u := gen.usageOf(usages)
		resp.Usage = &u
		writeJSON(w, http.StatusOK, resp)
		return
	}
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	if includeUsage {
		resp.Usage = jsonNull
	}
	s.stream(r.Context(), w, gen, func(sse *sseWriter, ev seqEvent) error {
		ch := completionChoice{Text: ev.text, Index: ev.index}
		if g.logprobs {
			ch.Logprobs = s.completionLogprobs(ev.tokens)
		}
		if ev.done {
			ch.FinishReason = &ev.finish
		}
		resp.Choices = []completionChoice{ch}
		return sse.send(resp)
	}, func(sse *sseWriter, u usageJSON) error {
		if !includeUsage {
			return nil
		}
		resp.Choices, resp.Usage = []completionChoice{}, &u
		return sse.send(resp)
	})
}

// completionParams validates a /v1/completions request and tokenizes its prompts.
func (s *Server) completionParams(req *completionRequest) (genParams, [][]int32, error) {
	g, err := req.params(s.defaults(openAIDefaults()), s.cfg.Model.Vocab.EOG(), s.cfg.Model.Vocab.VocabSize())
	if err != nil {
		return g, nil, err
	}
	if req.NPredict == nil {
		g.maxTokens = openAIMaxTokensDefault
	}
	if err := g.setMaxTokens(req.MaxTokens, req.MaxCompletionTokens); err != nil {
		return g, nil, err
	}
	if req.Echo {
		return g, nil, badRequest("echo", "echo is not supported")
	}
	if g.logprobs, g.topLogprobs, err = parseLogprobs(req.Logprobs); err != nil {
		return g, nil, err
	}
	if err := s.constrain(&g, &req.samplingFields, nil); err != nil {
		return g, nil, err
	}
	inputs, err := parsePrompts("prompt", req.Prompt)
	if err != nil {
		return g, nil, err
	}
	if err := g.setN(req.N, len(inputs)); err != nil {
		return g, nil, err
	}
	prompts := make([][]int32, len(inputs))
	for i, in := range inputs {
		if prompts[i], err = s.promptTokens("prompt", in); err != nil {
			return g, nil, err
		}
	}
	return g, prompts, nil
}

// promptTokens tokenizes a text prompt as llama.cpp's server does (special tokens added as the
// model asks, special-token text parsed) or checks a token-id prompt against the vocabulary.
func (s *Server) promptTokens(field string, in promptInput) ([]int32, error) {
	v := s.cfg.Model.Vocab
	if in.isText {
		if in.text == "" {
			return nil, badRequest(field, "%s is empty", field)
		}
		return v.Encode(in.text, true, true), nil
	}
	if len(in.tokens) == 0 {
		return nil, badRequest(field, "%s is an empty list of tokens", field)
	}
	for _, t := range in.tokens {
		if t < 0 || int(t) >= v.VocabSize() {
			return nil, badRequest(field, "token id %d is outside the vocabulary [0, %d)", t, v.VocabSize())
		}
	}
	return in.tokens, nil
}

// stream relays a generation as server-sent events: onEvent sends each sequence event, onEnd the
// closing usage chunk (it may send nothing), then OpenAI's [DONE]. A failed sequence ends the
// stream with an error event, and so does a stream cut at shutdown; a client that goes away ends
// it silently (the deferred cancel of the generation frees its sequences).
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, gen *generation,
	onEvent func(*sseWriter, seqEvent) error, onEnd func(*sseWriter, usageJSON) error) {
	sse := startSSE(w)
	usages := make([]engine.Usage, len(gen.prompts)*gen.n)
	for {
		select {
		case ev, ok := <-gen.events:
			if !ok {
				// The relays also stop when ctx ends, before their sequences are done.
				if !sse.endCut(ctx) && onEnd(sse, gen.usageOf(usages)) == nil {
					sse.done()
				}
				return
			}
			if ev.err != nil {
				sse.sendError(ev.err)
				return
			}
			if ev.done {
				usages[ev.index] = ev.usage
			}
			if err := onEvent(sse, ev); err != nil {
				return
			}
		case <-ctx.Done():
			sse.endCut(ctx)
			return
		}
	}
}

func (s *Server) completionLogprobs(toks []genToken) *completionLogprobs {
	lp := &completionLogprobs{
		Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{},
	}
	for _, t := range toks {
		lp.Tokens = append(lp.Tokens, s.pieceText(t.id))
		lp.TokenLogprobs = append(lp.TokenLogprobs, finiteLogprob(t.logprob))
		top := make(map[string]float64, len(t.top))
		for _, a := range t.top {
			top[s.pieceText(a.Token)] = finiteLogprob(a.LogProb)
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, t.offset)
	}
	return lp
}

// pieceText is the text of one token as logprobs report it (a byte token that is part of a
// multi-byte character is not valid UTF-8 alone; JSON encoding then shows U+FFFD, while the chat
// API's bytes field keeps the exact bytes).
func (s *Server) pieceText(id int32) string { return string(s.cfg.Model.Vocab.Piece(id)) }

// finiteLogprob maps -Inf (a token the sampler could never pick) to OpenAI's -9999, since JSON has
// no infinities.
func finiteLogprob(v float32) float64 {
	if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
		return -9999
	}
	return float64(v)
}
