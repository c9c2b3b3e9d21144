// Package openai is OpenAI's API over the server core: POST /v1/completions and
// /v1/chat/completions (their response objects and stream chunks), /v1/embeddings and
// llama-server's /v1/rerank, each also without /v1 as llama-server accepts them. Its handlers
// decode, then hand the generation to the core (server.Server.ServeCompletion) and word its
// events; chat rendering, tools, reasoning, limits, errors and the engine are the core's.
// GET /v1/models stays in the core: a NewMulti front answers it for all its models.
package openai

import (
	"crypto/rand"
	"time"

	"ubatch/server"
)

// Routes registers OpenAI's routes on s: a server.Dialect (Config.Dialects).
func Routes(s *server.Server) {
	a := &api{s}
	// Also without /v1, as llama-server accepts them.
	for _, prefix := range []string{"/v1", ""} {
		s.HandleFunc("POST "+prefix+"/completions", a.handleCompletions)
		s.HandleFunc("POST "+prefix+"/chat/completions", a.handleChatCompletions)
		s.HandleFunc("POST "+prefix+"/embeddings", a.handleEmbeddings)
	}
	for _, p := range []string{"/rerank", "/reranking", "/v1/rerank", "/v1/reranking"} { // llama-server's four names
		s.HandleFunc("POST "+p, a.handleRerank)
	}
}

// api is the core Server as OpenAI's handlers use it.
type api struct{ *server.Server }

// response is the response object of both generation routes, and of their stream chunks; C is
// the route's choice type.
type response[C any] struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []C    `json:"choices"`
	// Usage is a *server.UsageJSON in responses and final chunks, JSON null in the other
	// chunks of a stream that asked for usage, and omitted otherwise (OpenAI's convention).
	Usage any `json:"usage,omitempty"`
}

// jsonNull is the usage value of non-final chunks when the client asked for usage.
const jsonNull = server.RawJSON("null")

// reply is what the replies of both generation routes share: the response envelope, and the
// end of a stream (the usage chunk when asked for, then [DONE]).
type reply[C any] struct {
	resp         response[C]
	includeUsage bool
}

func newReply[C any](s *server.Server, id, object string, f *server.OpenAIFields) reply[C] {
	o := reply[C]{resp: response[C]{ID: id + rand.Text(), Object: object, Created: time.Now().Unix(), Model: s.Config().ModelID}}
	if f.Stream && f.StreamOptions != nil && f.StreamOptions.IncludeUsage {
		o.includeUsage, o.resp.Usage = true, jsonNull
	}
	return o
}

// send sends one chunk with choices.
func (o *reply[C]) send(sse *server.SSEWriter, choices ...C) error {
	o.resp.Choices = choices
	return sse.Send(o.resp)
}

func (o *reply[C]) End(sse *server.SSEWriter, u server.UsageJSON) error {
	if o.includeUsage {
		o.resp.Choices, o.resp.Usage = []C{}, &u // choices [], not null
		if err := sse.Send(o.resp); err != nil {
			return err
		}
	}
	return sse.Done()
}

// response is the non-streaming response with choices.
func (o *reply[C]) response(choices []C, u server.UsageJSON) any {
	o.resp.Choices, o.resp.Usage = choices, &u
	return o.resp
}
