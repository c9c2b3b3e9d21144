package ollama

import (
	"fmt"
	"net/http"
	"time"
	"ubatch/server"
)

// ollamaEntry describes the served model. The digest is the SHA-256 of the GGUF's header
// (metadata and tensor table, up to the tensor data) and its size, not of the whole file: it
// tells files apart without reading gigabytes of weights on a listing.
func (s *api) ollamaEntry() (server.OllamaModelEntry, error) {
	id := s.info()
	return id.Entry, id.Err
}

func (s *api) buildOllamaIdentity() server.OllamaIdentity {
	m := s.Config().Model
	return server.DescribeOllama(s.Config().ModelID, m.Path, m.File, m.Size)
}

func (s *api) handleOllamaTags(w http.ResponseWriter, r *http.Request) {
	e, err := s.ollamaEntry()
	if err != nil {
		server.WriteOllamaError(w, err)
		return
	}
	server.WriteJSON(w, http.StatusOK, map[string]any{"models": []server.OllamaModelEntry{e}})
}

// handleOllamaPS lists the loaded model: the server's one, loaded for its lifetime, which
// Ollama words as an expiry far in the future (as for keep_alive -1). size is the file's (the
// weights are mapped from it); size_vram 0: everything is in main memory.
func (s *api) handleOllamaPS(w http.ResponseWriter, r *http.Request) {
	e, err := s.ollamaEntry()
	if err != nil {
		server.WriteOllamaError(w, err)
		return
	}
	var vram int64
	e.ModifiedAt, e.SizeVRAM = "", &vram
	e.ExpiresAt = server.OllamaTime(time.Date(2318, 1, 1, 0, 0, 0, 0, time.UTC))
	e.ContextLength = s.Config().Engine.Limits().NCtxSeq
	server.WriteJSON(w, http.StatusOK, map[string]any{"models": []server.OllamaModelEntry{e}})
}

// decodeName reads a name request and resolves its model; false when it has answered.
func (s *api) decodeName(w http.ResponseWriter, r *http.Request, req *server.OllamaNameRequest) bool {
	if err := server.DecodeBody(w, r, s.Config().MaxBodyBytes, req); err != nil {
		server.WriteOllamaError(w, err)
		return false
	}
	if req.Model == "" {
		req.Model = req.Name
	}
	if _, err := s.ollamaModelName(r.Context(), "model", req.Model); err != nil {
		server.WriteOllamaError(w, err)
		return false
	}
	return true
}

// handleOllamaShow describes the model: its details, every GGUF metadata key in model_info,
// the chat template (Jinja, as the GGUF holds it, not Ollama's Go template) and the server's
// sampling defaults as parameters.
func (s *api) handleOllamaShow(w http.ResponseWriter, r *http.Request) {
	var req server.OllamaNameRequest
	if !s.decodeName(w, r, &req) {
		return
	}
	e, err := s.ollamaEntry()
	if err != nil {
		server.WriteOllamaError(w, err)
		return
	}
	m := s.Config().Model
	params := server.OllamaParams(s.Defaults(server.OllamaDefaults())) + fmt.Sprintf("\nnum_ctx %d", s.Config().Engine.Limits().NCtxSeq)
	caps := server.TemplateCaps(s.Template().Source())
	if m.Vocab.FIM().HasInfill() {
		caps = append(caps, "insert")
	}
	if s.Config().Embedder != nil {
		caps = append(caps, "embedding")
	}
	server.WriteJSON(w, http.StatusOK, server.ShowReply(m.File, m.Path, e, s.Template().Source(), params, caps, req.Verbose))
}

// handleOllamaPull answers a pull of the served model as done (it is here); the server has no
// model library to pull others into, which is said in a 404.
func (s *api) handleOllamaPull(w http.ResponseWriter, r *http.Request) {
	var req server.OllamaNameRequest
	if err := server.DecodeBody(w, r, s.Config().MaxBodyBytes, &req); err != nil {
		server.WriteOllamaError(w, err)
		return
	}
	if req.Model == "" {
		req.Model = req.Name
	}
	if _, err := s.ollamaModelName(r.Context(), "model", req.Model); err != nil {
		if ae := server.ToAPIError(err); ae.Status == http.StatusNotFound {
			err = server.NotFound(fmt.Sprintf("model %s not found: this server serves the one model it was started with "+
				"(%s) and cannot pull others", server.Echo(req.Model), s.Config().ModelID))
		}
		server.WriteOllamaError(w, err)
		return
	}
	done := map[string]string{"status": "success"}
	if !server.ParseOllamaStream(req.Stream) {
		server.WriteJSON(w, http.StatusOK, done)
		return
	}
	sse := server.OllamaRoute{}.Open(w)
	sse.Send(done)
}

// handleOllamaDelete refuses to delete the model being served (400) and does not know any other
// (404).
func (s *api) handleOllamaDelete(w http.ResponseWriter, r *http.Request) {
	var req server.OllamaNameRequest
	if !s.decodeName(w, r, &req) {
		return
	}
	server.WriteOllamaError(w, server.BadRequest("model", "model %s is the one this server serves: it cannot be deleted while served", server.Echo(req.Model)))
}
