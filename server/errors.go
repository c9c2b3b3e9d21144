package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"ubatch/engine"
	"ubatch/sample"
)

// APIError is an error with the HTTP status and OpenAI error fields it should be reported with.
type APIError struct {
	Status  int
	Type    string // OpenAI error type, e.g. "invalid_request_error"
	Param   string // the request field at fault, "" when none
	Code    string // machine-readable code, "" when none
	Message string
}

func (e *APIError) Error() string { return e.Message }

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

func (e *APIError) body() errorBody {
	d := errorDetail{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		d.Param = &e.Param
	}
	if e.Code != "" {
		d.Code = &e.Code
	}
	return errorBody{Error: d}
}

// BadRequest reports an invalid value of the request field param.
func BadRequest(param, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param,
		Message: fmt.Sprintf(format, args...)}
}

func NotFound(msg string) *APIError {
	return &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found", Message: msg}
}

func InternalError(err error) *APIError {
	return &APIError{Status: http.StatusInternalServerError, Type: "server_error", Message: err.Error()}
}

// ToAPIError maps an error from the engine (or anything else) to its status and shape.
func ToAPIError(err error) *APIError {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae
	}
	var pe *sample.ParamError
	if errors.As(err, &pe) {
		field := pe.Name
		if field == "ignore_tokens" { // the only list of tokens the sampler ignores: ignore_eos's
			field = "ignore_eos"
		}
		return BadRequest(field, "%s must be %s, got %v", field, pe.Want, pe.Value)
	}
	// A generation the request itself ended (its grammar's dead end or cost, its ignore_eos) is
	// the client's fault: a 400, so that a router in front does not hold it against the node.
	var re *sample.RequestError
	if errors.As(err, &re) {
		return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: re.Param, Code: re.Code,
			Message: re.Error()}
	}
	// A recovered panic is a bug: the client gets the ID that ties it to the logged stack.
	var panicked *engine.PanicError
	if errors.As(err, &panicked) {
		return &APIError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error",
			Message: panicked.Error()}
	}
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		return &APIError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "queue_full",
			Message: "the server is busy: too many requests are waiting; retry later"}
	case errors.Is(err, engine.ErrPromptSize):
		return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "prompt",
			Code: "context_length_exceeded", Message: err.Error()}
	case errors.Is(err, engine.ErrClosed):
		return &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down",
			Message: "the server is shutting down"}
	case errors.Is(err, errShutdown):
		return &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down", Message: err.Error()}
	}
	return InternalError(err)
}

// WriteError sends err as a JSON error response. A 429 (and a busy 503) carries Retry-After so that clients back
// off instead of hammering a full queue; a 408 closes the connection.
func WriteError(w http.ResponseWriter, err error) {
	ae := errorHeaders(w, err)
	WriteJSON(w, ae.Status, ae.body())
}

// errorHeaders maps err to its status and sets the headers that status needs, for the error
// writers of every API shape.
func errorHeaders(w http.ResponseWriter, err error) *APIError {
	ae := ToAPIError(err)
	switch ae.Status {
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "1")
	case http.StatusServiceUnavailable:
		if ae.Code == "server_busy" { // the parse budget (bounds.go): another try soon may pass
			w.Header().Set("Retry-After", "1")
		}
	case http.StatusRequestTimeout:
		// The rest of the body may still be on its way: the connection cannot carry another request.
		w.Header().Set("Connection", "close")
	}
	return ae
}

// WriteJSON sends v with the given status. Encoding errors cannot be reported to a client that
// has already received the status line, so they are dropped.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(InternalError(err).body())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
