package responses

import (
	"container/list"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"ubatch/server"
)

// The store's default bounds: stored responses are kept for previous_response_id and GET
// /v1/responses/{id} in memory only, so that clients cannot grow it without end.
const (
	defaultMaxStoredResponses = 256
	defaultMaxStoredBytes     = 64 << 20 // responses and their conversations, as JSON
)

// responseStore keeps the last finished responses (store: true, OpenAI's default), each with
// the conversation it answered and its output, so that a following request can name it as
// previous_response_id. It is least-recently-used within maxEntries and maxBytes: a
// conversation carried on keeps its latest response; one too large to keep is not stored. The
// zero value is ready, with the default bounds.
type responseStore struct {
	mu                   sync.Mutex
	maxEntries, maxBytes int
	bytes                int
	order                *list.List // of *storedResponse, most recently used first
	byID                 map[string]*list.Element
}

type storedResponse struct {
	id   string
	resp []byte // the response object, as GET answers it
	conv []byte // the chat messages: the conversation, then the response's output
}

func (st *storedResponse) size() int { return len(st.id) + len(st.resp) + len(st.conv) }

func (s *responseStore) init() {
	if s.byID == nil {
		s.order, s.byID = list.New(), map[string]*list.Element{}
		if s.maxEntries <= 0 {
			s.maxEntries = defaultMaxStoredResponses
		}
		if s.maxBytes <= 0 {
			s.maxBytes = defaultMaxStoredBytes
		}
	}
}

// put keeps resp (finished) with conv, evicting the least recently used beyond the bounds.
func (s *responseStore) put(resp *responseObject, conv []map[string]any) {
	rb, err1 := json.Marshal(resp)
	cb, err2 := json.Marshal(conv)
	if err1 != nil || err2 != nil {
		return
	}
	st := &storedResponse{id: resp.ID, resp: rb, conv: cb}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	if st.size() > s.maxBytes {
		return
	}
	s.remove(st.id)
	s.byID[st.id] = s.order.PushFront(st)
	s.bytes += st.size()
	for s.order.Len() > s.maxEntries || s.bytes > s.maxBytes {
		s.remove(s.order.Back().Value.(*storedResponse).id)
	}
}

// remove drops id if it is stored, reporting whether it was. s.mu must be held.
func (s *responseStore) remove(id string) bool {
	el, ok := s.byID[id]
	if !ok {
		return false
	}
	s.bytes -= el.Value.(*storedResponse).size()
	s.order.Remove(el)
	delete(s.byID, id)
	return true
}

// get returns the stored response id, marking it used.
func (s *responseStore) get(id string) (*storedResponse, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	el, ok := s.byID[id]
	if !ok {
		return nil, false
	}
	s.order.MoveToFront(el)
	return el.Value.(*storedResponse), true
}

// history is the conversation of response id with its output, for a request that continues it
// ("" : none). An unknown id is OpenAI's 400 previous_response_not_found.
func (s *responseStore) history(id string) ([]map[string]any, error) {
	if id == "" {
		return nil, nil
	}
	st, ok := s.get(id)
	if !ok {
		return nil, &server.APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "previous_response_id",
			Code: "previous_response_not_found", Message: fmt.Sprintf("Previous response with id '%s' not found.", id)}
	}
	var conv []map[string]any
	if err := json.Unmarshal(st.conv, &conv); err != nil {
		return nil, server.InternalError(err)
	}
	return conv, nil
}

func responseNotFound(id string) *server.APIError {
	return server.NotFound(fmt.Sprintf("Response with id '%s' not found (responses are kept in memory: the last %d, or fewer when large).", id, defaultMaxStoredResponses))
}

// handleGetResponse answers GET /v1/responses/{id} with a stored response.
func (s *api) handleGetResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, ok := s.responses.get(id)
	if !ok {
		server.WriteError(w, responseNotFound(id))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(st.resp, '\n'))
}

// handleDeleteResponse answers DELETE /v1/responses/{id}: the response is forgotten.
func (s *api) handleDeleteResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.responses.mu.Lock()
	s.responses.init()
	ok := s.responses.remove(id)
	s.responses.mu.Unlock()
	if !ok {
		server.WriteError(w, responseNotFound(id))
		return
	}
	server.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response", "deleted": true})
}
