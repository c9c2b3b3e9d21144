package openai

import (
	"context"
	"net/http"

	"ubatch/chat"
	"ubatch/server"
)

// chatRequest is the body of POST /v1/chat/completions: the core's chat request, which it
// renders, constrains and tokenizes (server.Server.ChatParams).
type chatRequest struct{ server.ChatRequest }

// chatMessage is a reply; content is null when the reply is only tool calls.
type chatMessage struct {
	Role             string                `json:"role"`
	Content          *string               `json:"content"`
	ReasoningContent *string               `json:"reasoning_content,omitempty"` // the model's thought, when split
	ToolCalls        []server.ToolCallJSON `json:"tool_calls,omitempty"`
}

// chatDelta is a streamed message fragment; absent fields are omitted, as OpenAI does.
type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
}

// chatTokenLogprob is a chosen token's entry: token, logprob and bytes as an alternative's, then
// the alternatives (JSON puts the embedded fields first, in their order).
type chatTokenLogprob struct {
	chatTopLogprob
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      *chatMessage  `json:"message,omitempty"`
	Delta        *chatDelta    `json:"delta,omitempty"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

func (a *api) handleChatCompletions(w http.ResponseWriter, r *http.Request) {
	a.ServeCompletion(w, r, &chatRequest{})
}

func (req *chatRequest) Prepare(ctx context.Context, s *server.Server) (server.GenParams, [][]int32, server.Reply, error) {
	g, prompt, err := s.ChatParams(ctx, &req.ChatRequest)
	if err != nil {
		return g, nil, nil, err
	}
	object := "chat.completion"
	if req.Stream {
		object = "chat.completion.chunk"
	}
	c := &chatReply{reply: newReply[chatChoice](s, "chatcmpl-", object, &req.OpenAIFields), s: s, g: g,
		reasoning: req.Reasoning}
	c.started = make([]bool, g.N())
	if req.Stream {
		c.streams = make([]chatStream, g.N())
		for i := range c.streams {
			if req.Reasoning.Split {
				c.streams[i].reasoning = chat.NewReasoningParser(req.Reasoning.InThought)
			}
			if g.Tools != nil {
				c.streams[i].tools = chat.NewToolParser(g.Tools.Format, g.Tools.Names)
				c.streams[i].tools.StreamCalls()
			}
		}
	}
	return g, [][]int32{prompt}, c, nil
}

// chatReply words a generation as /v1/chat/completions does: the reply is read for reasoning
// (reasoning_content), then, with tools, for tool calls (streaming, text that may start one is
// held back until the call's function is known, then the call streams as deltas: chunk.go).
type chatReply struct {
	reply[chatChoice]
	s         *server.Server
	g         server.GenParams
	reasoning server.ReasoningMode
	started   []bool       // by choice: the assistant role was sent
	streams   []chatStream // by choice, streaming
}

func (c *chatReply) Whole(res []*server.ChoiceResult, u server.UsageJSON) any {
	choices := make([]chatChoice, len(res))
	for i, r := range res {
		msg := &chatMessage{Role: "assistant"}
		content := r.Text.String()
		if c.reasoning.Split {
			var reasoning string
			if reasoning, content = chat.SplitReasoning(content, c.reasoning.InThought); reasoning != "" {
				msg.ReasoningContent = &reasoning
			}
		}
		if c.g.Tools != nil {
			var calls []chat.ToolCall
			content, calls = c.g.Tools.Parse(content, r.Finish == "length")
			if len(calls) > 0 {
				msg.ToolCalls = server.ToolReply(calls, c.g.Tools.Parallel, false)
				r.Finish = toolsFinish(r.Finish)
			}
		}
		if content != "" || msg.ToolCalls == nil {
			msg.Content = &content
		}
		choices[i] = chatChoice{Index: i, Message: msg, FinishReason: &r.Finish}
		if c.g.Logprobs {
			choices[i].Logprobs = chatLogprobsOf(c.s, r.Tokens)
		}
	}
	return c.response(choices, u)
}

func chatLogprobsOf(s *server.Server, toks []server.GenToken) *chatLogprobs {
	lp := &chatLogprobs{Content: []chatTokenLogprob{}}
	for _, t := range toks {
		e := chatTokenLogprob{chatTopLogprob: tokenLogprob(s, t.ID, t.Logprob), TopLogprobs: []chatTopLogprob{}}
		for _, a := range t.Top {
			e.TopLogprobs = append(e.TopLogprobs, tokenLogprob(s, a.Token, a.LogProb))
		}
		lp.Content = append(lp.Content, e)
	}
	return lp
}

// tokenLogprob is token id's logprob entry.
func tokenLogprob(s *server.Server, id int32, logprob float32) chatTopLogprob {
	return chatTopLogprob{Token: s.PieceText(id), Logprob: server.FiniteLogprob(logprob), Bytes: s.PieceBytes(id)}
}
