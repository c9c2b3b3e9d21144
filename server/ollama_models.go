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

// OllamaModelEntry is one model of /api/tags (and, with the ps fields, of /api/ps).
type OllamaModelEntry struct {
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

// OllamaIdentity is what the routes say about the served model, computed once (see
// server/ollama, and the front per file version): the digest reads the file's header.
type OllamaIdentity struct {
	Entry OllamaModelEntry
	Err   error
}

// DescribeOllama is the entry of the model id in file f (mapped from path, size bytes).
func DescribeOllama(id, path string, f *gguf.File, size int64) OllamaIdentity {
	e := OllamaModelEntry{Name: ollamaName(id), Model: ollamaName(id), Size: size}
	if fi, err := os.Stat(path); err == nil {
		e.ModifiedAt = OllamaTime(fi.ModTime())
	}
	fd, err := os.Open(path)
	if err != nil {
		return OllamaIdentity{Err: InternalError(fmt.Errorf("reading the model file for its digest: %w", err))}
	}
	defer fd.Close()
	h := sha256.New()
	if _, err := io.CopyN(h, fd, int64(min(f.DataOffset, uint64(size)))); err != nil {
		return OllamaIdentity{Err: InternalError(fmt.Errorf("reading the model file for its digest: %w", err))}
	}
	fmt.Fprintf(h, "size %d", size)
	e.Digest = hex.EncodeToString(h.Sum(nil))
	arch, _ := f.String("general.architecture")
	e.Details = ollamaDetails{Format: "gguf", Family: arch, Families: []string{arch}}
	e.Details.ParameterSize, e.Details.QuantizationLevel = ollamaWeights(f.Tensors)
	return OllamaIdentity{Entry: e}
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

func (s *Server) HandleOllamaVersion(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, map[string]string{"version": OllamaVersion})
}

// OllamaNameRequest is the body of /api/show, /api/pull and /api/delete: model, or its older
// name, name.
type OllamaNameRequest struct {
	OllamaRoute
	Model   string `json:"model"`
	Name    string `json:"name"`
	Verbose bool   `json:"verbose"`
	Stream  *bool  `json:"stream"`
}

// maxShowArray is the longest metadata array /api/show lists without verbose (the vocabulary's
// are hundreds of thousands of entries); longer ones are null, as Ollama leaves them out.
const maxShowArray = 64

// OllamaParams is /api/show's parameters for sampling defaults d (Ollama's Modelfile lines).
func OllamaParams(d sample.Params) string {
	return fmt.Sprintf("temperature %g\ntop_k %d\ntop_p %g\nmin_p %g\nrepeat_penalty %g\nrepeat_last_n %d",
		d.Temperature, d.TopK, d.TopP, d.MinP, d.RepeatPenalty, d.RepeatLastN)
}

// TemplateCaps are the capabilities a chat template shows: completion, tools when it renders
// them (Ollama's test too), thinking when it has the <think> markup or harmony's channels.
func TemplateCaps(tmpl string) []string {
	caps := []string{"completion"}
	if strings.Contains(tmpl, "tools") {
		caps = append(caps, "tools")
	}
	if chat.DetectReasoningFormat(tmpl) != chat.ReasoningNone {
		caps = append(caps, "thinking")
	}
	return caps
}

// ShowReply is /api/show's answer for the model in f (at path): without verbose, metadata
// arrays longer than maxShowArray are null.
func ShowReply(f *gguf.File, path string, e OllamaModelEntry, tmpl, params string, caps []string, verbose bool) map[string]any {
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
