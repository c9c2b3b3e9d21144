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

// Dir returns the shared folder, or skips the test when it cannot be found.
func Dir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("UBATCH_SHARED"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(filepath.Dir(file))) // internal/testdata -> repo root
	d := filepath.Join(filepath.Dir(root), "shared")
	if _, err := os.Stat(filepath.Join(d, "models")); err != nil {
		t.Skipf("shared test data not found at %s (set UBATCH_SHARED to its path): %v", d, err)
	}
	return d
}

// Model returns the path of a file in shared/models.
func Model(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(Dir(t), "models", name)
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
	dir := filepath.Join(Dir(t), "reference")
	raw, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Reference
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	lr, err := os.ReadFile(filepath.Join(dir, r.LogitsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(lr) != 4*len(r.PromptTokens)*r.NVocab {
		t.Fatalf("%s: %d bytes, want %d", r.LogitsFile, len(lr), 4*len(r.PromptTokens)*r.NVocab)
	}
	r.Logits = make([]float32, len(lr)/4)
	for i := range r.Logits {
		r.Logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(lr[4*i:]))
	}
	return &r
}
