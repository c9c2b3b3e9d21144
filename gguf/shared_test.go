package gguf

import (
	"os"
	"path/filepath"
	"testing"

	"ubatch/quant"
)

// sharedDir locates the read-only test data folder: <repo root>/../shared, where the repo root is
// the nearest ancestor of the package directory holding go.mod. It skips the test when absent.
func sharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("no go.mod above the package directory: cannot locate ../shared test data")
		}
		dir = parent
	}
	shared := filepath.Join(dir, "..", "shared")
	if _, err := os.Stat(shared); err != nil {
		t.Skipf("shared test data not available at %s: %v", shared, err)
	}
	return shared
}

func sharedFiles(t *testing.T) []string {
	shared := sharedDir(t)
	models, _ := filepath.Glob(filepath.Join(shared, "models", "*.gguf"))
	vocabs, _ := filepath.Glob(filepath.Join(shared, "models", "vocab", "*.gguf"))
	files := append(models, vocabs...)
	if len(files) == 0 {
		t.Skipf("no .gguf files under %s/models", shared)
	}
	return files
}

// TestSharedFiles opens every real GGUF in the shared data and checks structural invariants.
func TestSharedFiles(t *testing.T) {
	for _, path := range sharedFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Version != 3 {
				t.Errorf("version %d, want 3", f.Version)
			}
			if f.Architecture() == "" {
				t.Error("no general.architecture")
			}
			if _, ok := f.Strings("tokenizer.ggml.tokens"); !ok {
				t.Error("no tokenizer.ggml.tokens string array")
			}
			if f.DataOffset%f.Alignment != 0 {
				t.Errorf("data offset %d not aligned to %d", f.DataOffset, f.Alignment)
			}
			for i := range f.Tensors {
				ti := &f.Tensors[i]
				want := uint64(ti.Type.RowSize(int(ti.Dims[0]))) * ti.Rows()
				if uint64(len(ti.Data)) != want || ti.Size != want {
					t.Errorf("tensor %s %s %v: len(Data)=%d Size=%d, want %d", ti.Name, ti.Type, ti.Dims, len(ti.Data), ti.Size, want)
				}
				if got, ok := f.Tensor(ti.Name); !ok || got != ti {
					t.Errorf("Tensor(%q) does not find it", ti.Name)
				}
			}
		})
	}
}

func TestStories260K(t *testing.T) {
	f, err := Open(filepath.Join(sharedDir(t), "models", "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if a := f.Architecture(); a != "llama" {
		t.Errorf("architecture %q, want llama", a)
	}
	if n, ok := f.Uint("llama.embedding_length"); !ok || n != 64 {
		t.Errorf("embedding_length %d %v, want 64", n, ok)
	}
	if n, ok := f.Int("llama.block_count"); !ok || n != 5 {
		t.Errorf("block_count %d %v, want 5", n, ok)
	}
	if eps, ok := f.Float("llama.attention.layer_norm_rms_epsilon"); !ok || eps < 0.99e-5 || eps > 1.01e-5 {
		t.Errorf("rms eps %g %v, want 1e-5", eps, ok)
	}
	toks, ok := f.Strings("tokenizer.ggml.tokens")
	if !ok || len(toks) != 512 || toks[1] != "<s>" {
		t.Fatalf("tokens: ok=%v len=%d", ok, len(toks))
	}
	if scores, ok := f.Float32s("tokenizer.ggml.scores"); !ok || len(scores) != 512 {
		t.Errorf("scores: ok=%v len=%d", ok, len(scores))
	}
	if tt, ok := f.Int32s("tokenizer.ggml.token_type"); !ok || len(tt) != 512 || tt[0] != 2 {
		t.Errorf("token_type: ok=%v len=%d", ok, len(tt))
	}
	if len(f.Tensors) != 48 {
		t.Errorf("%d tensors, want 48", len(f.Tensors))
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok {
		t.Fatal("no token_embd.weight")
	}
	if emb.Type != quant.F32 || len(emb.Dims) != 2 || emb.Dims[0] != 64 || emb.Dims[1] != 512 || emb.NumElements() != 64*512 {
		t.Errorf("token_embd.weight: %s %v", emb.Type, emb.Dims)
	}
	if _, ok := f.Tensor("no.such.tensor"); ok {
		t.Error("found a tensor that does not exist")
	}
	if err := f.Close(); err != nil {
		t.Error(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// BenchmarkOpen measures mapping and parsing a model with a 32000-token vocabulary (metadata
// decoding dominates; tensor data is not touched).
func BenchmarkOpen(b *testing.B) {
	path := filepath.Join(sharedDir(b), "models", "synth-tiny-q4_k_m.gguf")
	b.ReportAllocs()
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
