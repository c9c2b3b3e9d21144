package openai

import (
	"context"
	"encoding/json"
	"net/http"

	"ubatch/server"
)

// maxTokensDefault is max_tokens of /v1/completions when absent, as in OpenAI's API.
const maxTokensDefault = 16

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	server.SamplingFields
	server.OpenAIFields
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

func (a *api) handleCompletions(w http.ResponseWriter, r *http.Request) {
	a.ServeCompletion(w, r, &completionRequest{})
}

func (req *completionRequest) Prepare(ctx context.Context, s *server.Server) (server.GenParams, [][]int32, server.Reply, error) {
	g, prompts, err := completionParams(ctx, s, req)
	if err != nil {
		return g, nil, nil, err
	}
	return g, prompts, &completionReply{reply: newReply[completionChoice](s, "cmpl-", "text_completion", &req.OpenAIFields), s: s, g: g}, nil
}

// completionReply words a generation as /v1/completions does.
type completionReply struct {
	reply[completionChoice]
	s *server.Server
	g server.GenParams
}

func (c *completionReply) choice(index int, text string, toks []server.GenToken) completionChoice {
	ch := completionChoice{Text: text, Index: index}
	if c.g.Logprobs {
		ch.Logprobs = logprobsOf(c.s, toks)
	}
	return ch
}

func (c *completionReply) Chunk(sse *server.SSEWriter, ev server.SeqEvent) error {
	ch := c.choice(ev.Index(), ev.Text, ev.Tokens)
	if ev.Done {
		ch.FinishReason = &ev.Finish
	}
	return c.send(sse, ch)
}

func (c *completionReply) Whole(res []*server.ChoiceResult, u server.UsageJSON) any {
	choices := make([]completionChoice, len(res))
	for i, r := range res {
		choices[i] = c.choice(i, r.Text.String(), r.Tokens)
		choices[i].FinishReason = &r.Finish
	}
	return c.response(choices, u)
}

// completionParams validates a /v1/completions request and tokenizes its prompts.
func completionParams(ctx context.Context, s *server.Server, req *completionRequest) (server.GenParams, [][]int32, error) {
	v := s.Config().Model.Vocab
	g, err := req.Params(s.Defaults(server.OpenAIDefaults()), v.EOG(), v.VocabSize())
	if err != nil {
		return g, nil, err
	}
	if req.NPredict == nil {
		g.MaxTokens = maxTokensDefault
	}
	if err := g.SetMaxTokens(req.MaxTokens, req.MaxCompletionTokens); err != nil {
		return g, nil, err
	}
	g.Stream = req.Stream
	if req.Echo {
		return g, nil, server.BadRequest("echo", "echo is not supported")
	}
	if g.Logprobs, g.TopLogprobs, err = server.ParseLogprobs(req.Logprobs); err != nil {
		return g, nil, err
	}
	if err := s.Constrain(ctx, &g, &req.SamplingFields, nil); err != nil {
		return g, nil, err
	}
	inputs, err := server.ParsePrompts("prompt", req.Prompt)
	if err != nil {
		return g, nil, err
	}
	if err := g.SetN(req.N, len(inputs), s.MaxN()); err != nil {
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

// logprobsOf is the completion logprobs object of toks.
func logprobsOf(s *server.Server, toks []server.GenToken) *completionLogprobs {
	lp := &completionLogprobs{
		Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{},
	}
	for _, t := range toks {
		lp.Tokens = append(lp.Tokens, s.PieceText(t.ID))
		lp.TokenLogprobs = append(lp.TokenLogprobs, server.FiniteLogprob(t.Logprob))
		top := make(map[string]float64, len(t.Top))
		for _, a := range t.Top {
			top[s.PieceText(a.Token)] = server.FiniteLogprob(a.LogProb)
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, t.Offset())
	}
	return lp
}
