package gguf

import (
	"path/filepath"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/quant"
)

// sharedFiles lists every GGUF in shared/models and shared/models/vocab, skipping the test when
// there is none.
func sharedFiles(t *testing.T) []string {
	models, _ := filepath.Glob(testdata.Model(t, "*.gguf"))
	vocabs, _ := filepath.Glob(testdata.Model(t, "vocab/*.gguf"))
	files := append(models, vocabs...)
	if len(files) == 0 {
		t.Skipf("no .gguf files under %s", testdata.Path(t, "models"))
	}
	return files
}

// forSharedFiles runs fn in a subtest per real GGUF in the shared data (see sharedFiles), with the
// file opened.
func forSharedFiles(t *testing.T, fn func(t *testing.T, path string, f *File)) {
	for _, path := range sharedFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fn(t, path, f)
		})
	}
}

// TestSharedFiles opens every real GGUF in the shared data and checks structural invariants.
func TestSharedFiles(t *testing.T) {
	forSharedFiles(t, func(t *testing.T, _ string, f *File) {
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

func TestStories260K(t *testing.T) {
	f, err := Open(testdata.Model(t, "stories260K.gguf"))
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
	path := testdata.Model(b, "synth-tiny-q4_k_m.gguf")
	b.ReportAllocs()
	for b.Loop() {
		f, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
