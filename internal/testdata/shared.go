// Package testdata locates the read-only shared test data (../shared beside the repository) and
// reads llama.cpp's reference results from it. Tests skip when the folder is absent.
package testdata

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Lookup returns the shared folder ($UBATCH_SHARED, else ../shared beside the repository) and
// whether it is present, for code that falls back to other data instead of skipping.
func Lookup() (string, bool) {
	if d := os.Getenv("UBATCH_SHARED"); d != "" {
		return d, true
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(filepath.Dir(file))) // internal/testdata -> repo root
	d := filepath.Join(filepath.Dir(root), "shared")
	_, err := os.Stat(filepath.Join(d, "models"))
	return d, err == nil
}

// Dir returns the shared folder, or skips the test when it cannot be found.
func Dir(t testing.TB) string {
	t.Helper()
	d, ok := Lookup()
	if !ok {
		t.Skipf("shared test data not found at %s (set UBATCH_SHARED to its path)", d)
	}
	return d
}

// Path returns the path of REL (slash-separated, e.g. "templates/x.jinja") under the shared
// folder, skipping the test when the folder is absent.
func Path(t testing.TB, rel string) string {
	t.Helper()
	return filepath.Join(Dir(t), filepath.FromSlash(rel))
}

// Model returns the path of a file in shared/models (NAME may be slash-separated, e.g.
// "vocab/ggml-vocab-gpt-2.gguf").
func Model(t testing.TB, name string) string {
	t.Helper()
	return Path(t, "models/"+name)
}

// ReadFile returns the contents of REL under the shared folder (see Path); a missing file fails
// the test.
func ReadFile(t testing.TB, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Reference is llama.cpp's result for one model (shared/reference/NAME.json).
type Reference struct {
	Model        string         `json:"model"`
	Prompt       string         `json:"prompt"`
	NVocab       int            `json:"n_vocab"`
	PromptTokens []int32        `json:"prompt_tokens"`
	Top10        [][][2]float64 `json:"top10"`
	GreedyTokens []int32        `json:"greedy_tokens"`
	GreedyText   string         `json:"greedy_text"`
	LogitsFile   string         `json:"logits_file"`
	Logits       []float32      `json:"-"` // [len(PromptTokens)][NVocab]
}

// LoadReference reads shared/reference/NAME.json and its logits file.
func LoadReference(t testing.TB, name string) *Reference {
	t.Helper()
	raw := ReadFile(t, "reference/"+name+".json")
	var r Reference
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	lr := ReadFile(t, "reference/"+r.LogitsFile)
	if len(lr) != 4*len(r.PromptTokens)*r.NVocab {
		t.Fatalf("%s: %d bytes, want %d", r.LogitsFile, len(lr), 4*len(r.PromptTokens)*r.NVocab)
	}
	r.Logits = make([]float32, len(lr)/4)
	for i := range r.Logits {
		r.Logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(lr[4*i:]))
	}
	return &r
}

// Row returns the logits of prompt position I.
func (r *Reference) Row(i int) []float32 {
	return r.Logits[i*r.NVocab : (i+1)*r.NVocab]
}
