package server

import (
	"net/http"
	"time"

	"ubatch/sample"
)

// Ollama's shapes that the core shares with server/ollama, Ollama's routes: the error body, the
// NDJSON stream, the sampling defaults and times. The multi-model front (models_http.go)
// answers Ollama's listings itself with them (and with ollama_models.go's model entries), for
// models that are not loaded.

// OllamaVersion is what GET /api/version reports: the Ollama release whose API these routes
// follow (think, tools, format as a schema, /api/embed), for clients that gate features on it.
const OllamaVersion = "0.11.0"

// ollamaError is Ollama's error body: {"error": "message"}, which its clients read as the
// message of their ResponseError.
type ollamaError struct {
	Error string `json:"error"`
}

// WriteOllamaError sends err with its status (and headers) in Ollama's shape.
func WriteOllamaError(w http.ResponseWriter, err error) {
	ae := errorHeaders(w, err)
	WriteJSON(w, ae.Status, ollamaError{Error: ae.Message})
}

// OllamaRoute gives Ollama's requests and replies their error shape on the shared path.
type OllamaRoute struct{}

func (OllamaRoute) writeError(w http.ResponseWriter, err error) { WriteOllamaError(w, err) }

// Open starts an NDJSON stream (Ollama's: one JSON object a line) in place of server-sent
// events; a failure after the start is an {"error": ...} line, which Ollama's clients throw.
func (OllamaRoute) Open(w http.ResponseWriter) *SSEWriter {
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sse := &SSEWriter{w: w, rc: http.NewResponseController(w), ndjson: true}
	sse.rc.Flush()
	sse.ErrorEvent = func(err error) error { return sse.Send(ollamaError{Error: ToAPIError(err).Message}) }
	return sse
}

// OllamaDefaults are Ollama's sampling defaults (api.DefaultOptions), the base of a request's
// options when the server sets none of its own.
func OllamaDefaults() sample.Params {
	return sample.Params{Temperature: OllamaTemperature, TopK: OllamaTopK, TopP: OllamaTopP,
		RepeatPenalty: OllamaRepeatPenalty, RepeatLastN: 64}
}

const (
	OllamaTemperature   = 0.8
	OllamaTopK          = 40
	OllamaTopP          = 0.9
	OllamaRepeatPenalty = 1.1
)

// ParseOllamaStream reads the stream field: absent means true, as in Ollama.
func ParseOllamaStream(b *bool) bool { return b == nil || *b }

// OllamaTime is how Ollama writes times (RFC 3339 with nanoseconds).
func OllamaTime(t time.Time) string { return t.Format(time.RFC3339Nano) }
