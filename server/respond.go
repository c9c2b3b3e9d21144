package server

import (
	"context"
	"errors"
	"io"
	"net/http"
)

// completionRoute is the decoded body of one of the completion routes (/v1/completions,
// /v1/chat/completions, llama.cpp's /completion): the one place that knows the route's fields.
type completionRoute interface {
	// prepare validates the request and tokenizes its prompts, and returns how the route
	// answers the generation. ctx is the request's: compiling a constraint stops when it ends.
	prepare(ctx context.Context, s *Server) (genParams, [][]int32, reply, error)
}

// reply is how a route words a generation: as server-sent events (chunk for each event of a
// sequence, end once every sequence is done) or, without streaming, as one JSON object built
// from every sequence's output.
type reply interface {
	chunk(sse *sseWriter, ev seqEvent) error
	end(sse *sseWriter, u usageJSON) error
	whole(res []*choiceResult, u usageJSON) any
}

// streamBeginner is a reply whose streams open with events of their own (the Responses API's
// response.created) and may set the stream's errorEvent.
type streamBeginner interface {
	begin(sse *sseWriter) error
}

// streamOpener is a reply whose stream is not server-sent events (Ollama's NDJSON): open
// writes the status and headers and returns the writer of its lines.
type streamOpener interface {
	open(w http.ResponseWriter) *sseWriter
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
	return writeError
}

// serveCompletion is the one path of a completion request: decode the body into req, prepare,
// submit, then answer (respond). Rendering and tokenizing hold the parse budget (bounds.go).
func (s *Server) serveCompletion(w http.ResponseWriter, r *http.Request, req completionRoute) {
	fail := errorWriterOf(req)
	release, err := s.decodeParsed(w, r, req)
	if err != nil {
		fail(w, err)
		return
	}
	g, prompts, rep, err := req.prepare(r.Context(), s)
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
	respond(r.Context(), w, gen, rep, g.stream)
}

// respond is the one loop from the engine's stream to the socket. Streaming, it sends each
// event as rep words it; a failed sequence ends the stream with an error event, and so does a
// stream cut at shutdown; a client that goes away ends it silently (the caller's cancel of the
// generation frees its sequences). Without streaming it accumulates the events and answers with
// rep.whole, or with the error status of a failure.
func respond(ctx context.Context, w http.ResponseWriter, gen *generation, rep reply, stream bool) {
	var sse *sseWriter
	if stream {
		if o, ok := rep.(streamOpener); ok {
			sse = o.open(w)
		} else {
			sse = startSSE(w)
		}
		if b, ok := rep.(streamBeginner); ok && b.begin(sse) != nil {
			return
		}
	}
	res := make([]*choiceResult, len(gen.prompts)*gen.n)
	for i := range res {
		res[i] = &choiceResult{}
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
		if ev.done {
			c.finish, c.stopWord, c.usage, c.genTime = ev.finish, ev.stopWord, ev.usage, ev.genTime
		}
		if sse != nil {
			if rep.chunk(sse, ev) != nil {
				return
			}
			continue
		}
		c.text.WriteString(ev.text)
		c.tokens = append(c.tokens, ev.tokens...)
	}
	u := gen.usageOf(res)
	if sse == nil {
		writeJSON(w, http.StatusOK, rep.whole(res, u))
		return
	}
	if !sse.endCut(ctx) {
		rep.end(sse, u)
	}
}
