package server

import (
	"context"
	"errors"
	"io"
	"net/http"
)

// CompletionRoute is the decoded body of one of the completion routes (/v1/completions,
// /v1/chat/completions, llama.cpp's /completion): the one place that knows the route's fields.
type CompletionRoute interface {
	// Prepare validates the request and tokenizes its prompts, and returns how the route
	// answers the generation. ctx is the request's: compiling a constraint stops when it ends.
	Prepare(ctx context.Context, s *Server) (GenParams, [][]int32, Reply, error)
}

// Reply is how a route words a generation: as server-sent events (Chunk for each event of a
// sequence, End once every sequence is done) or, without streaming, as one JSON object built
// from every sequence's output.
type Reply interface {
	Chunk(sse *SSEWriter, ev SeqEvent) error
	End(sse *SSEWriter, u UsageJSON) error
	Whole(res []*ChoiceResult, u UsageJSON) any
}

// streamBeginner is a reply whose streams open with events of their own (the Responses API's
// response.created) and may set the stream's errorEvent.
type streamBeginner interface {
	Begin(sse *SSEWriter) error
}

// streamOpener is a reply whose stream is not server-sent events (Ollama's NDJSON): open
// writes the status and headers and returns the writer of its lines.
type streamOpener interface {
	Open(w http.ResponseWriter) *SSEWriter
}

// routeErrors is a route (its request or its reply) whose error responses have a shape of
// their own (Ollama's {"error": "..."}) instead of OpenAI's.
type routeErrors interface {
	writeError(w http.ResponseWriter, err error)
}

// errorWriterOf is how v's route writes an error response.
func errorWriterOf(v any) func(http.ResponseWriter, error) {
	if re, ok := v.(routeErrors); ok {
		return re.writeError
	}
	return WriteError
}

// ServeCompletion is the one path of a completion request: decode the body into req, prepare,
// submit, then answer (respond). Rendering and tokenizing hold the parse budget (bounds.go).
func (s *Server) ServeCompletion(w http.ResponseWriter, r *http.Request, req CompletionRoute) {
	fail := errorWriterOf(req)
	release, err := s.DecodeParsed(w, r, req)
	if err != nil {
		fail(w, err)
		return
	}
	g, prompts, rep, err := req.Prepare(r.Context(), s)
	release() // the text is rendered and tokenized
	if err == nil {
		err = s.checkPriority(r, g.priority)
	}
	if err != nil {
		fail(w, err)
		return
	}
	gen, err := s.generate(r.Context(), prompts, g)
	if err != nil {
		fail(w, err)
		return
	}
	defer gen.cancel()
	respond(r.Context(), w, gen, rep, g.Stream)
}

// respond is the one loop from the engine's stream to the socket. Streaming, it sends each
// event as rep words it; a failed sequence ends the stream with an error event, and so does a
// stream cut at shutdown; a client that goes away ends it silently (the caller's cancel of the
// generation frees its sequences). Without streaming it accumulates the events and answers with
// rep.Whole, or with the error status of a failure.
func respond(ctx context.Context, w http.ResponseWriter, gen *generation, rep Reply, stream bool) {
	var sse *SSEWriter
	if stream {
		if o, ok := rep.(streamOpener); ok {
			sse = o.Open(w)
		} else {
			sse = startSSE(w)
		}
		if b, ok := rep.(streamBeginner); ok && b.Begin(sse) != nil {
			return
		}
	}
	res := make([]*ChoiceResult, len(gen.prompts)*gen.n)
	for i := range res {
		res[i] = &ChoiceResult{}
	}
	for {
		ev, err := gen.next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		switch {
		case err != nil && sse == nil:
			errorWriterOf(rep)(w, err)
			return
		case err != nil:
			if !sse.endCut(ctx) {
				sse.sendError(err)
			}
			return
		}
		c := res[ev.index]
		if ev.Done {
			c.Finish, c.StopWord, c.Usage, c.genTime = ev.Finish, ev.StopWord, ev.Usage, ev.genTime
		}
		if sse != nil {
			if rep.Chunk(sse, ev) != nil {
				return
			}
			continue
		}
		c.Text.WriteString(ev.Text)
		c.Tokens = append(c.Tokens, ev.Tokens...)
	}
	u := gen.usageOf(res)
	if sse == nil {
		WriteJSON(w, http.StatusOK, rep.Whole(res, u))
		return
	}
	if !sse.endCut(ctx) {
		rep.End(sse, u)
	}
}
