package server

import (
	"net/http"
)

// readyBody is GET /ready's answer: "ready", or "busy" with the models that refuse requests.
type readyBody struct {
	Status string   `json:"status"`
	Full   []string `json:"full,omitempty"` // loaded models whose queue is full
}

// handleReady is the single-model server's readiness: 200 while its engine queues a request
// (Engine.Accepting), 503 "busy" while its queue is full or it shuts down. /health stays 200
// then: the node is alive, a load balancer should only send its requests elsewhere.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Engine != nil && !s.cfg.Engine.Accepting() {
		writeReady(w, []string{s.cfg.ModelID})
		return
	}
	writeReady(w, nil)
}

// handleReady is a NewMulti front's readiness: 503 "busy" when every loaded model refuses
// requests (its queue full), 200 otherwise. With no model loaded it is ready: a request loads
// one. A node serving one model (the chart's) is ready exactly while that model's engine is.
func (f *front) handleReady(w http.ResponseWriter, r *http.Request) {
	var full []string
	loaded := f.reg.loadedModels()
	for _, m := range loaded {
		if !m.l.Engine.Accepting() {
			full = append(full, m.spec.ID)
		}
	}
	if len(loaded) > 0 && len(full) == len(loaded) {
		writeReady(w, full)
		return
	}
	writeReady(w, nil)
}

func writeReady(w http.ResponseWriter, full []string) {
	if len(full) > 0 {
		w.Header().Set("Retry-After", "1")
		WriteJSON(w, http.StatusServiceUnavailable, readyBody{Status: "busy", Full: full})
		return
	}
	WriteJSON(w, http.StatusOK, readyBody{Status: "ready"})
}
