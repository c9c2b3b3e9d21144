// Package model opens a GGUF model file: it maps the file, picks the architecture's
// implementation and builds the tokenizer from the file's metadata.
package model

import (
	"fmt"
	"os"

	"ubatch/gguf"
	"ubatch/model/llama"
	"ubatch/tokenizer"
)

// Model is an open model file: weights (still in the mapping), hyper-parameters and tokenizer.
type Model struct {
	Path  string
	Size  int64 // file size in bytes
	File  *gguf.File
	LLM   *llama.Model
	Vocab *tokenizer.Tokenizer
	Name  string // general.name, or the file name

	touched byte // keeps Prefetch's reads from being optimised away
}

// Open maps path and prepares the model. Errors name the file and say what is wrong with it.
func Open(path string) (*Model, error) { return OpenWithProgress(path, nil) }

// OpenWithProgress is Open, calling progress (when not nil) with bytes done and total while the
// weights are packed (see llama.LoadWithProgress).
func OpenWithProgress(path string, progress func(done, total int64)) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w (pass a GGUF file with -m)", path, err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	m := &Model{Path: path, Size: st.Size(), File: f}
	if m.LLM, err = llama.LoadWithProgress(f, progress); err != nil {
		f.Close()
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	if m.Vocab, err = tokenizer.FromGGUF(f); err != nil {
		m.LLM.Close()
		f.Close()
		return nil, fmt.Errorf("model %s: tokenizer: %w", path, err)
	}
	if m.Vocab.VocabSize() != m.LLM.Vocab {
		m.LLM.Close()
		f.Close()
		return nil, fmt.Errorf("model %s: tokenizer has %d tokens but token_embd has %d rows", path, m.Vocab.VocabSize(), m.LLM.Vocab)
	}
	m.Name, _ = f.String("general.name")
	if m.Name == "" {
		m.Name = st.Name()
	}
	return m, nil
}

// ChatTemplate returns the model's Jinja chat template, or "" when it has none.
func (m *Model) ChatTemplate() string {
	s, _ := m.File.String("tokenizer.chat_template")
	return s
}

// Close frees the packed weights and unmaps the file; the Model must not be used afterwards.
func (m *Model) Close() error {
	err := m.LLM.Close()
	if ferr := m.File.Close(); err == nil {
		err = ferr
	}
	return err
}

// Prefetch reads every weight matrix still in the file mapping once, page by page, so that the
// first forward pass does not stall on page faults (packed weights are in memory already).
// progress (may be nil) is called with bytes done and total as it goes.
func (m *Model) Prefetch(progress func(done, total int64)) {
	var total, done int64
	tensors := m.LLM.FileTensors()
	for _, t := range tensors {
		total += int64(len(t))
	}
	const page, report = 4096, 32 << 20
	var sink byte
	next := int64(report)
	for _, data := range tensors {
		for off := 0; off < len(data); off += page {
			sink += data[off]
		}
		done += int64(len(data))
		if progress != nil && done >= next {
			progress(done, total)
			next = done + report
		}
	}
	if progress != nil {
		progress(total, total)
	}
	m.touched = sink
}
