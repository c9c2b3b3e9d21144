// Package model opens a GGUF model file: it maps the file, dispatches on general.architecture to
// the family registered for it, packs the weights and builds the tokenizer from the metadata.
//
// A family (model/llama, model/qwen2, ...) registers itself from its package's init:
//
//	func init() { model.Register("qwen2", load) }
//
// where load binds the family's tensors by name through a Binder and returns a runner.Graph.
// Importing ubatch/model/all links every family in.
package model

import (
	"fmt"
	"os"
	"sort"
	"sync"

	"ubatch/gguf"
	"ubatch/runner"
	"ubatch/tokenizer"
)

// Loader builds a family's graph from an open file; b.File is the file and b.Arch its
// general.architecture. Errors name the key or tensor at fault.
type Loader func(b *Binder) (runner.Graph, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Loader{}
)

// Register makes a family's loader available for files whose general.architecture is arch. It
// panics when arch is registered twice (a programming error, found at start-up).
func Register(arch string, load Loader) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[arch]; dup {
		panic("model: architecture " + arch + " registered twice")
	}
	registry[arch] = load
}

// Architectures lists the registered architectures, sorted.
func Architectures() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	var out []string
	for a := range registry {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

func loader(arch string) (Loader, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	l, ok := registry[arch]
	return l, ok
}

// Model is an open model file: its graph over the weights (still in the mapping, or packed),
// and its tokenizer.
type Model struct {
	Path  string
	Size  int64 // file size in bytes
	File  *gguf.File
	Arch  string // general.architecture
	Graph runner.Graph
	Vocab *tokenizer.Tokenizer
	Name  string // general.name, or the file name

	packed  []byte // the buffer of packed weights (see pack), freed by Close
	touched byte   // keeps Prefetch's reads from being optimised away
}

// Hparams returns the graph's hyper-parameters.
func (m *Model) Hparams() *runner.Hparams { return m.Graph.Hparams() }

// Open maps path and prepares the model. Errors name the file and say what is wrong with it.
func Open(path string) (*Model, error) { return OpenWithProgress(path, nil) }

// OpenWithProgress is Open, calling progress (when not nil) with bytes done and total while the
// weights are packed, the part of loading that takes a while for a large model.
func OpenWithProgress(path string, progress func(done, total int64)) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w (pass a GGUF file with -m)", path, err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	m, err := Load(f, LoadOptions{Progress: progress})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	m.Path, m.Size = path, st.Size()
	if m.Name == "" {
		m.Name = st.Name()
	}
	return m, nil
}

// LoadOptions adjust Load.
type LoadOptions struct {
	Progress func(done, total int64) // called while packing weights (may be nil)
	NoPack   bool                    // keep every matrix in the file layout (tests compare both)
}

// Load builds a Model over an open file (which must stay open while the Model is used); it is
// Open without the file handling, for callers that parsed the file themselves (tests, fuzzing).
// Close frees its packed weights but leaves the file open.
func Load(f *gguf.File, o LoadOptions) (*Model, error) {
	arch := f.Architecture()
	l, ok := loader(arch)
	if !ok {
		return nil, fmt.Errorf("unsupported architecture %q: ubatch runs %v models", arch, Architectures())
	}
	m := &Model{File: f, Arch: arch}
	b := &Binder{File: f, Arch: arch}
	g, err := l(b)
	if err == nil {
		err = b.Err()
	}
	if err != nil {
		return nil, err
	}
	if err := checkHparams(g.Hparams()); err != nil {
		return nil, err
	}
	m.Graph = g
	if m.Vocab, err = tokenizer.FromGGUF(f); err != nil {
		return nil, err // tokenizer errors say "tokenizer: ..." already
	}
	if n := m.Hparams().Vocab; m.Vocab.VocabSize() != n {
		return nil, fmt.Errorf("tokenizer has %d tokens but token_embd has %d rows", m.Vocab.VocabSize(), n)
	}
	if !o.NoPack {
		if err := m.pack(o.Progress); err != nil {
			m.Close()
			return nil, err
		}
	}
	m.Name, _ = f.String("general.name")
	return m, nil
}

// checkHparams is the runner's precondition on any family's sizes.
func checkHparams(h *runner.Hparams) error {
	switch {
	case h.Dim <= 0 || h.NLayers <= 0 || h.NHeads <= 0 || h.NKVHeads <= 0 || h.HeadDim <= 0 || h.FFN <= 0:
		return fmt.Errorf("inconsistent sizes %+v", *h)
	case h.NHeads%h.NKVHeads != 0:
		return fmt.Errorf("%d kv heads do not divide %d heads", h.NKVHeads, h.NHeads)
	case h.Vocab <= 0:
		return fmt.Errorf("token_embd.weight has no rows")
	}
	return nil
}

// ChatTemplate returns the model's Jinja chat template, or "" when it has none.
func (m *Model) ChatTemplate() string {
	s, _ := m.File.String("tokenizer.chat_template")
	return s
}

// Close frees the packed weights; the caller closes the file (Open's Model: Close does).
func (m *Model) Close() error {
	err := m.freePacked()
	if m.Path != "" {
		if ferr := m.File.Close(); err == nil {
			err = ferr
		}
	}
	return err
}

// Prefetch reads every weight matrix still in the file mapping once, page by page, so that the
// first forward pass does not stall on page faults (packed weights are in memory already).
// progress (may be nil) is called with bytes done and total as it goes.
func (m *Model) Prefetch(progress func(done, total int64)) {
	var total, done int64
	tensors := m.fileTensors()
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

// fileTensors returns the weight matrices the forward pass reads from the file mapping (not
// packed), each once.
func (m *Model) fileTensors() [][]byte {
	var out [][]byte
	seen := map[*byte]bool{}
	for _, w := range m.Graph.Matrices() {
		if !w.Packed() && !seen[&w.Data[0]] {
			seen[&w.Data[0]] = true
			out = append(out, w.Data)
		}
	}
	return out
}
