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
	fs := newFlags("synth", "synth [--arch FAMILY] [--shape SHAPE] --type f32|f16|q8_0|q4_0|q4_k_m|q6_k|mxfp4 [--vocab VOCAB.gguf|builtin] [--chat-template FILE] -o OUT.gguf", stderr)
	arch := fs.String("arch", "llama", "model family: llama, llama3 (with rope_freqs), qwen2, qwen3, gemma2, gemma3, gemma4 (its kinds by --shape), phi3, or the mixtures of experts qwen3moe and gpt-oss")
	shape := fs.String("shape", "", "model shape: tinyllama (1.1B), small (~110M), tiny (the shared synth-tiny shape), mini (for tests), moe-bench (qwen3moe: 24 layers, dim 2048, 64 experts of 768 with 8 used), gemma4's dense or moe, or the family's own (default: small for llama, else the family's shared model's)")
	typ := fs.String("type", "q8_0", "weight type: f32, f16, q8_0, q4_0, q4_k_m (llama.cpp's per-tensor mix), q6_k or mxfp4 (llama.cpp's MXFP4_MOE: MXFP4 experts, Q8_0 elsewhere)")
	vocab := fs.String("vocab", "", "vocab GGUF whose tokenizer is copied, or \"builtin\" (a 512-token SentencePiece vocabulary); default: the family's shared vocabulary (shared/models/vocab/ggml-vocab-llama-spm.gguf for llama) beside the repository")
	chatTmpl := fs.String("chat-template", "", "file whose text is stored as tokenizer.chat_template")
	fim := fs.Bool("fim", false, "write the vocabulary's fill-in-the-middle token ids (for /infill); with --vocab builtin its last tokens are <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>, <|fim_pad|>, <|repo_name|>, <|file_sep|>")
	rerank := fs.Bool("rerank", false, "write a reranker (for serve --rerank): pooling type rank, labels yes/no, a cls.output.weight head and Qwen 3's rerank prompt")
	out := fs.StringP("output", "o", "", "output GGUF path (required)")
	seed := fs.Uint64("seed", 42, "random seed")
	threads := fs.IntP("threads", "t", 0, "threads (0 = all cores)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("-o OUT.gguf is required")
	}
	a, err := synth.ArchByName(*arch)
	if err != nil {
		return err
	}
	s := a.Shape
	if *shape != "" && *shape != a.Shape.Name {
		if s, err = a.ShapeByName(*shape); err != nil {
			return err
		}
	}
	vf, err := openVocab(*vocab, a, *fim)
	if err != nil {
		return err
	}
	defer vf.Close()
	o := synth.Options{Arch: a.Name, Shape: s, FileType: *typ, Vocab: vf, Seed: *seed, Threads: *threads, FIM: *fim, Rerank: *rerank,
		Progress: func(done, total int) { fmt.Fprintf(stderr, "\rsynth: %d/%d tensors", done, total) }}
	if *chatTmpl != "" {
		b, err := os.ReadFile(*chatTmpl)
		if err != nil {
			return fmt.Errorf("chat template: %w", err)
		}
		o.ChatTemplate = string(b)
	}
	start := time.Now()
	w, err := synth.Build(o)
	fmt.Fprintln(stderr)
	if err != nil {
		return err
	}
	if err := w.WriteFile(*out); err != nil {
		return err
	}
	st, _ := os.Stat(*out)
	fmt.Fprintf(stdout, "wrote %s: %s, shape %s, type %s, %.1f MiB in %.1f s\n", *out, a.Name, s.Name, *typ, float64(st.Size())/(1<<20), time.Since(start).Seconds())
	return nil
}

// openVocab opens the vocabulary --vocab names: a file, "builtin" (with FIM tokens for fim), or
// (empty) the family's shared vocabulary file.
func openVocab(path string, a synth.Arch, fim bool) (*gguf.File, error) {
	switch {
	case path == "builtin" && fim:
		return synth.BuiltinVocabFIM(512)
	case path == "builtin":
		return synth.BuiltinVocab(512)
	case path == "":
		p, ok := findShared(filepath.Join("models", "vocab", a.Vocab))
		if !ok {
			return nil, fmt.Errorf("no vocabulary: %s not found beside the repository; pass --vocab PATH to a GGUF with a tokenizer, or --vocab builtin", a.Vocab)
		}
		path = p
	}
	vf, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("vocab: %w", err)
	}
	return vf, nil
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
