package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"ubatch/gguf"
	"ubatch/synth"
)

func cmdSynth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("synth", "synth --shape tinyllama|small|tiny --type f16|q8_0|q4_0|q4_k_m [--vocab VOCAB.gguf] -o OUT.gguf", stderr)
	shape := fs.String("shape", "small", "model shape: tinyllama (1.1B), small (~110M) or tiny (the shared synth-tiny shape)")
	typ := fs.String("type", "q8_0", "weight type: f32, f16, q8_0, q4_0 or q4_k_m (llama.cpp's per-tensor mix)")
	vocab := fs.String("vocab", "", "vocab GGUF whose tokenizer is copied (default: shared/models/vocab/ggml-vocab-llama-spm.gguf beside the repository)")
	out := fs.String("o", "", "output GGUF path (required)")
	seed := fs.Uint64("seed", 42, "random seed")
	threads := fs.Int("t", 0, "threads (0 = all cores)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("-o OUT.gguf is required")
	}
	s, err := synth.ShapeByName(*shape)
	if err != nil {
		return err
	}
	if *vocab == "" {
		p, ok := findShared(filepath.Join("models", "vocab", "ggml-vocab-llama-spm.gguf"))
		if !ok {
			return fmt.Errorf("no vocabulary: pass --vocab PATH to a GGUF with a tokenizer (e.g. ggml-vocab-llama-spm.gguf)")
		}
		*vocab = p
	}
	vf, err := gguf.Open(*vocab)
	if err != nil {
		return fmt.Errorf("vocab: %w", err)
	}
	defer vf.Close()
	start := time.Now()
	w, err := synth.Build(synth.Options{Shape: s, FileType: *typ, Vocab: vf, Seed: *seed, Threads: *threads,
		Progress: func(done, total int) { fmt.Fprintf(stderr, "\rsynth: %d/%d tensors", done, total) }})
	fmt.Fprintln(stderr)
	if err != nil {
		return err
	}
	if err := w.WriteFile(*out); err != nil {
		return err
	}
	st, _ := os.Stat(*out)
	fmt.Fprintf(stdout, "wrote %s: shape %s, type %s, %.1f MiB in %.1f s\n", *out, s.Name, *typ, float64(st.Size())/(1<<20), time.Since(start).Seconds())
	return nil
}

// findShared looks for shared/REL beside the working directory or one of its parents.
func findShared(rel string) (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		for _, c := range []string{filepath.Join(dir, "shared", rel), filepath.Join(dir, "..", "shared", rel)} {
			if _, err := os.Stat(c); err == nil {
				return c, true
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}
