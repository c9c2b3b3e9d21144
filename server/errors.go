package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"ubatch/engine"
	"ubatch/sample"
)

// apiError is an error with the HTTP status and OpenAI error fields it should be reported with.
type apiError struct {
	status  int
	typ     string // OpenAI error type, e.g. "invalid_request_error"
	param   string // the request field at fault, "" when none
	code    string // machine-readable code, "" when none
	message string
}

func (e *apiError) Error() string { return e.message }

// errorBody is OpenAI's error shape: {"error": {"message", "type", "param", "code"}}. param and
// code are null when unknown, as OpenAI sends them.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() errorBody {
	d := errorDetail{Message: e.message, Type: e.typ}
	if e.param != "" {
		d.Param = &e.param
	}
	if e.code != "" {
		d.Code = &e.code
	}
	return errorBody{Error: d}
}

// badRequest reports an invalid value of the request field param.
func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: param,
		message: fmt.Sprintf(format, args...)}
}

func notFound(msg string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "not_found", message: msg}
}

func internalError(err error) *apiError {
	return &apiError{status: http.StatusInternalServerError, typ: "server_error", message: err.Error()}
}

// toAPIError maps an error from the engine (or anything else) to its status and shape.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var pe *sample.ParamError
	if errors.As(err, &pe) {
		field := pe.Name
		if field == "ignore_tokens" { // the only list of tokens the sampler ignores: ignore_eos's
			field = "ignore_eos"
		}
		return badRequest(field, "%s must be %s, got %v", field, pe.Want, pe.Value)
	}
	// A generation the request itself ended (its grammar's dead end or cost, its ignore_eos) is
	// the client's fault: a 400, so that a router in front does not hold it against the node.
	var re *sample.RequestError
	if errors.As(err, &re) {
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: re.Param, code: re.Code,
			message: re.Error()}
	}
	// A recovered panic is a bug: the client gets the ID that ties it to the logged stack.
	var panicked *engine.PanicError
	if errors.As(err, &panicked) {
		return &apiError{status: http.StatusInternalServerError, typ: "server_error", code: "internal_error",
			message: panicked.Error()}
	}
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		return &apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "queue_full",
			message: "the server is busy: too many requests are waiting; retry later"}
	case errors.Is(err, engine.ErrPromptSize):
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "prompt",
			code: "context_length_exceeded", message: err.Error()}
	case errors.Is(err, engine.ErrClosed):
		return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "shutting_down",
			message: "the server is shutting down"}
	case errors.Is(err, errShutdown):
		return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "shutting_down", message: err.Error()}
	}
	return internalError(err)
}

// writeError sends err as a JSON error response. A 429 (and a busy 503) carries Retry-After so that clients back
// off instead of hammering a full queue; a 408 closes the connection.
func writeError(w http.ResponseWriter, err error) {
	ae := errorHeaders(w, err)
	writeJSON(w, ae.status, ae.body())
}

// errorHeaders maps err to its status and sets the headers that status needs, for the error
// writers of every API shape.
func errorHeaders(w http.ResponseWriter, err error) *apiError {
	ae := toAPIError(err)
	switch ae.status {
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "1")
	case http.StatusServiceUnavailable:
		if ae.code == "server_busy" { // the parse budget (bounds.go): another try soon may pass
			w.Header().Set("Retry-After", "1")
		}
	case http.StatusRequestTimeout:
		// The rest of the body may still be on its way: the connection cannot carry another request.
		w.Header().Set("Connection", "close")
	}
	return ae
}

// writeJSON sends v with the given status. Encoding errors cannot be reported to a client that
// has already received the status line, so they are dropped.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(internalError(err).body())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
