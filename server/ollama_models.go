package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"time"

	"ubatch/chat"
	"ubatch/gguf"
	"ubatch/quant"
	"ubatch/sample"
)

// ollamaDetails is a model's details object in /api/tags, /api/ps and /api/show.
type ollamaDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// ollamaModelEntry is one model of /api/tags (and, with the ps fields, of /api/ps).
type ollamaModelEntry struct {
	Name          string        `json:"name"`
	Model         string        `json:"model"`
	ModifiedAt    string        `json:"modified_at,omitempty"`
	Size          int64         `json:"size"`
	Digest        string        `json:"digest"`
	Details       ollamaDetails `json:"details"`
	ExpiresAt     string        `json:"expires_at,omitempty"`
	SizeVRAM      *int64        `json:"size_vram,omitempty"`
	ContextLength int           `json:"context_length,omitempty"`
}

// ollamaIdentity is what the routes say about the served model, computed once (see
// Server.ollamaInfo): the digest reads the file's header.
type ollamaIdentity struct {
	entry ollamaModelEntry
	err   error
}

// ollamaEntry describes the served model. The digest is the SHA-256 of the GGUF's header
// (metadata and tensor table, up to the tensor data) and its size, not of the whole file: it
// tells files apart without reading gigabytes of weights on a listing.
func (s *Server) ollamaEntry() (ollamaModelEntry, error) {
	id := s.ollamaInfo()
	return id.entry, id.err
}

func (s *Server) buildOllamaIdentity() ollamaIdentity {
	m := s.cfg.Model
	return describeOllama(s.cfg.ModelID, m.Path, m.File, m.Size)
}

// describeOllama is the entry of the model id in file f (mapped from path, size bytes).
func describeOllama(id, path string, f *gguf.File, size int64) ollamaIdentity {
	e := ollamaModelEntry{Name: ollamaName(id), Model: ollamaName(id), Size: size}
	if fi, err := os.Stat(path); err == nil {
		e.ModifiedAt = ollamaTime(fi.ModTime())
	}
	fd, err := os.Open(path)
	if err != nil {
		return ollamaIdentity{err: InternalError(fmt.Errorf("reading the model file for its digest: %w", err))}
	}
	defer fd.Close()
	h := sha256.New()
	if _, err := io.CopyN(h, fd, int64(min(f.DataOffset, uint64(size)))); err != nil {
		return ollamaIdentity{err: InternalError(fmt.Errorf("reading the model file for its digest: %w", err))}
	}
	fmt.Fprintf(h, "size %d", size)
	e.Digest = hex.EncodeToString(h.Sum(nil))
	arch, _ := f.String("general.architecture")
	e.Details = ollamaDetails{Format: "gguf", Family: arch, Families: []string{arch}}
	e.Details.ParameterSize, e.Details.QuantizationLevel = ollamaWeights(f.Tensors)
	return ollamaIdentity{entry: e}
}

// ollamaWeights is the model's parameter count as Ollama writes it ("260.0K", "7.6B") and its
// quantization level: the type holding most of the weights' bytes.
func ollamaWeights(tensors []gguf.TensorInfo) (size, level string) {
	var params uint64
	bytesBy := map[quant.Type]uint64{}
	for _, t := range tensors {
		params += t.NumElements()
		if len(t.Dims) >= 2 {
			bytesBy[t.Type] += t.Size
		}
	}
	var top quant.Type
	var most uint64
	for t, b := range bytesBy {
		if b > most || b == most && t < top {
			top, most = t, b
		}
	}
	if most > 0 {
		level = strings.ToUpper(top.String())
	}
	switch p := float64(params); {
	case p >= 1e9:
		size = fmt.Sprintf("%.1fB", p/1e9)
	case p >= 1e6:
		size = fmt.Sprintf("%.1fM", p/1e6)
	default:
		size = fmt.Sprintf("%.1fK", p/1e3)
	}
	return size, level
}

func (s *Server) handleOllamaTags(w http.ResponseWriter, r *http.Request) {
	e, err := s.ollamaEntry()
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"models": []ollamaModelEntry{e}})
}

// handleOllamaPS lists the loaded model: the server's one, loaded for its lifetime, which
// Ollama words as an expiry far in the future (as for keep_alive -1). size is the file's (the
// weights are mapped from it); size_vram 0: everything is in main memory.
func (s *Server) handleOllamaPS(w http.ResponseWriter, r *http.Request) {
	e, err := s.ollamaEntry()
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	var vram int64
	e.ModifiedAt, e.SizeVRAM = "", &vram
	e.ExpiresAt = ollamaTime(time.Date(2318, 1, 1, 0, 0, 0, 0, time.UTC))
	e.ContextLength = s.cfg.Engine.Limits().NCtxSeq
	WriteJSON(w, http.StatusOK, map[string]any{"models": []ollamaModelEntry{e}})
}

func (s *Server) handleOllamaVersion(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, map[string]string{"version": ollamaVersion})
}

// ollamaNameRequest is the body of /api/show, /api/pull and /api/delete: model, or its older
// name, name.
type ollamaNameRequest struct {
	ollamaRoute
	Model   string `json:"model"`
	Name    string `json:"name"`
	Verbose bool   `json:"verbose"`
	Stream  *bool  `json:"stream"`
}

// decodeName reads a name request and resolves its model; false when it has answered.
func (s *Server) decodeName(w http.ResponseWriter, r *http.Request, req *ollamaNameRequest) bool {
	if err := DecodeBody(w, r, s.cfg.MaxBodyBytes, req); err != nil {
		writeOllamaError(w, err)
		return false
	}
	if req.Model == "" {
		req.Model = req.Name
	}
	if _, err := s.ollamaModelName(r.Context(), "model", req.Model); err != nil {
		writeOllamaError(w, err)
		return false
	}
	return true
}

// maxShowArray is the longest metadata array /api/show lists without verbose (the vocabulary's
// are hundreds of thousands of entries); longer ones are null, as Ollama leaves them out.
const maxShowArray = 64

// handleOllamaShow describes the model: its details, every GGUF metadata key in model_info,
// the chat template (Jinja, as the GGUF holds it, not Ollama's Go template) and the server's
// sampling defaults as parameters.
func (s *Server) handleOllamaShow(w http.ResponseWriter, r *http.Request) {
	var req ollamaNameRequest
	if !s.decodeName(w, r, &req) {
		return
	}
	e, err := s.ollamaEntry()
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	m := s.cfg.Model
	params := ollamaParams(s.Defaults(ollamaDefaults())) + fmt.Sprintf("\nnum_ctx %d", s.cfg.Engine.Limits().NCtxSeq)
	caps := templateCaps(s.tmpl.Source())
	if m.Vocab.FIM().HasInfill() {
		caps = append(caps, "insert")
	}
	if s.cfg.Embedder != nil {
		caps = append(caps, "embedding")
	}
	WriteJSON(w, http.StatusOK, showReply(m.File, m.Path, e, s.tmpl.Source(), params, caps, req.Verbose))
}

// ollamaParams is /api/show's parameters for sampling defaults d (Ollama's Modelfile lines).
func ollamaParams(d sample.Params) string {
	return fmt.Sprintf("temperature %g\ntop_k %d\ntop_p %g\nmin_p %g\nrepeat_penalty %g\nrepeat_last_n %d",
		d.Temperature, d.TopK, d.TopP, d.MinP, d.RepeatPenalty, d.RepeatLastN)
}

// templateCaps are the capabilities a chat template shows: completion, tools when it renders
// them (Ollama's test too), thinking when it has the <think> markup.
func templateCaps(tmpl string) []string {
	caps := []string{"completion"}
	if strings.Contains(tmpl, "tools") {
		caps = append(caps, "tools")
	}
	if chat.DetectReasoningFormat(tmpl) == chat.ReasoningThink {
		caps = append(caps, "thinking")
	}
	return caps
}

// showReply is /api/show's answer for the model in f (at path): without verbose, metadata
// arrays longer than maxShowArray are null.
func showReply(f *gguf.File, path string, e ollamaModelEntry, tmpl, params string, caps []string, verbose bool) map[string]any {
	info := map[string]any{}
	for _, kv := range f.Metadata {
		info[kv.Key] = kv.Value
		if n, ok := arrayLen(kv.Value); ok && n > maxShowArray && !verbose {
			info[kv.Key] = nil
		}
	}
	return map[string]any{
		"modelfile":    fmt.Sprintf("# ubatch serves this file; a Modelfile cannot change it\nFROM %s\n", path),
		"parameters":   params,
		"template":     tmpl,
		"details":      e.Details,
		"model_info":   info,
		"capabilities": caps,
		"modified_at":  e.ModifiedAt,
	}
}

// arrayLen is the length of a metadata array value.
func arrayLen(v any) (int, bool) {
	switch a := v.(type) {
	case []string:
		return len(a), true
	case []float32:
		return len(a), true
	case []int32:
		return len(a), true
	case []any:
		return len(a), true
	case string, bool, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return 0, false
	}
	return math.MaxInt, true // another typed array: listed only with verbose
}

// handleOllamaPull answers a pull of the served model as done (it is here); the server has no
// model library to pull others into, which is said in a 404.
func (s *Server) handleOllamaPull(w http.ResponseWriter, r *http.Request) {
	var req ollamaNameRequest
	if err := DecodeBody(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeOllamaError(w, err)
		return
	}
	if req.Model == "" {
		req.Model = req.Name
	}
	if _, err := s.ollamaModelName(r.Context(), "model", req.Model); err != nil {
		if ae := ToAPIError(err); ae.Status == http.StatusNotFound {
			err = NotFound(fmt.Sprintf("model %s not found: this server serves the one model it was started with "+
				"(%s) and cannot pull others", Echo(req.Model), s.cfg.ModelID))
		}
		writeOllamaError(w, err)
		return
	}
	done := map[string]string{"status": "success"}
	if !parseOllamaStream(req.Stream) {
		WriteJSON(w, http.StatusOK, done)
		return
	}
	sse := ollamaRoute{}.open(w)
	sse.Send(done)
}

// handleOllamaDelete refuses to delete the model being served (400) and does not know any other
// (404).
func (s *Server) handleOllamaDelete(w http.ResponseWriter, r *http.Request) {
	var req ollamaNameRequest
	if !s.decodeName(w, r, &req) {
		return
	}
	writeOllamaError(w, BadRequest("model", "model %s is the one this server serves: it cannot be deleted while served", Echo(req.Model)))
}
