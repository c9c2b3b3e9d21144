package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"

	"ubatch/engine"
)

// serveRecovering is serve behind the panic middleware (recoverPanics).
func (s *Server) serveRecovering(w *recorder, r *http.Request) {
	recoverPanics(w, r, s.cfg.Logger, s.cfg.Metrics, s.serve)
}

// recoverPanics runs next and recovers a panic in it, which is a bug: it is logged at error
// level with the stack under a new error ID, counted (ubatch_panics_total{where="handler"};
// met may be nil), and answered with a 500 carrying the ID in OpenAI's error body when no
// status was sent yet. Once the status is out (a stream), nothing can be said in HTTP any more,
// so the connection is cut by re-panicking with http.ErrAbortHandler, as net/http itself would
// cut it, but without net/http's own unstructured stack dump. A handler's own
// http.ErrAbortHandler is net/http's way to abort a response on purpose: it passes through
// untouched, neither logged nor counted.
func recoverPanics(w *recorder, r *http.Request, log *slog.Logger, met *Metrics, next func(http.ResponseWriter, *http.Request)) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v)
		}
		id := engine.NewErrorID()
		// The deferred call runs on top of the panicking frames: debug.Stack shows where it was.
		log.Error("panic serving a request", "error_id", id, "method", r.Method, "path", r.URL.Path,
			"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		if met != nil {
			met.handlerPanicked()
		}
		if w.wroteHeader {
			panic(http.ErrAbortHandler)
		}
		w.Header().Del("Content-Length") // the handler may have announced a body it did not write
		WriteError(w, &APIError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error",
			Message: fmt.Sprintf("internal error %s: please report it", id)})
	}()
	next(w, r)
}

var _ engine.PanicObserver = Observers(nil)

// Panicked implements engine.PanicObserver: it passes the event on to the observers that count
// panics.
func (obs Observers) Panicked() {
	for _, o := range obs {
		if p, ok := o.(engine.PanicObserver); ok {
			p.Panicked()
		}
	}
}
