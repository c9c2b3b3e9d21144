package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
)

// SSEWriter writes server-sent events, one `data: JSON` event per chunk, flushing each so that
// clients see tokens as they are generated.
type SSEWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	// ErrorEvent, when set, words a failure instead of sendError's error object (the
	// Responses API's response.failed and error events).
	ErrorEvent func(err error) error
	// ndjson frames each event as one line of JSON (Ollama's streams) instead of "data: ...".
	ndjson bool
}

// startSSE sends the 200 status and event-stream headers. After it, errors can only be reported
// as events.
func startSSE(w http.ResponseWriter) *SSEWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // keep reverse proxies from buffering the stream
	w.WriteHeader(http.StatusOK)
	s := &SSEWriter{w: w, rc: http.NewResponseController(w)}
	s.rc.Flush()
	return s
}

// Send writes v as one event. An error means the client is gone.
func (s *SSEWriter) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.raw(b)
}

// Done writes OpenAI's end-of-stream marker, data: [DONE].
func (s *SSEWriter) Done() error { return s.raw([]byte("[DONE]")) }

// sendError reports a failure that happened after the stream started, as an OpenAI error object.
func (s *SSEWriter) sendError(err error) error {
	if s.ErrorEvent != nil {
		return s.ErrorEvent(err)
	}
	return s.Send(ToAPIError(err).body())
}

// endCut reports whether ctx, the request's context, has ended, and when the server cut the
// request at shutdown (the client is still there) sends the reason as an error event, so that the
// client can tell a cut stream from a finished one.
func (s *SSEWriter) endCut(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	if err := context.Cause(ctx); errors.Is(err, errShutdown) {
		s.sendError(err)
	}
	return true
}

// SendEvent sends b (one JSON object) as an event named name: "event: name" before its data
// line (the Responses API's streams name every event).
func (s *SSEWriter) SendEvent(name string, b []byte) error {
	buf := make([]byte, 0, len(name)+8)
	buf = append(append(append(buf, "event: "...), name...), '\n')
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.raw(b)
}

func (s *SSEWriter) raw(b []byte) error {
	buf := make([]byte, 0, len(b)+8)
	if s.ndjson {
		buf = append(append(buf, b...), '\n')
	} else {
		buf = append(buf, "data: "...)
		buf = append(buf, b...)
		buf = append(buf, "\n\n"...)
	}
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}
