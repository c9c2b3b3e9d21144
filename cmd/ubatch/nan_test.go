package main

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"ubatch/gguf"
	"ubatch/internal/testdata"
)

// nanModel writes stories260K with its output projection set to NaN, so that every logit is NaN
// while the file stays well-formed.
func nanModel(t *testing.T) string {
	t.Helper()
	f, err := gguf.Open(testdata.Model(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	if err := w.SetFrom(f, nil); err != nil {
		t.Fatal(err)
	}
	poisoned := false
	for _, ti := range f.Tensors {
		data := ti.Data
		if ti.Name == "output.weight" {
			data = make([]byte, len(ti.Data))
			for i := 0; i < len(data); i += 4 {
				binary.LittleEndian.PutUint32(data[i:], math.Float32bits(float32(math.NaN())))
			}
			poisoned = true
		}
		if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, data); err != nil {
			t.Fatal(err)
		}
	}
	if !poisoned {
		t.Fatal("stories260K has no output.weight")
	}
	path := filepath.Join(t.TempDir(), "nan.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestNaNLogitsAreNamed runs the commands that sample on a model whose logits are all NaN: they
// must fail saying so, not with the consequence (an invalid token id fed back into a batch).
func TestNaNLogitsAreNamed(t *testing.T) {
	model := nanModel(t)
	tests := []struct {
		name string
		args []string
	}{
		{name: "run greedy", args: []string{"run", "-m", model, "-p", "Once", "-n", "4", "--temp", "0"}},
		{name: "run sampling", args: []string{"run", "-m", model, "-p", "Once", "-n", "4", "--temp", "0.8", "--seed", "1"}},
		{name: "batched", args: []string{"batched", "-m", model, "-np", "2", "-n", "4", "--temp", "0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := ubatch(t, tc.args...)
			if code != 1 {
				t.Fatalf("exit %d, want 1: %s", code, errs)
			}
			if !strings.Contains(errs, "no token can be sampled: NaN logits") || strings.Contains(errs, "outside vocabulary") {
				t.Fatalf("stderr does not name the NaN logits:\n%s", errs)
			}
		})
	}
}
