// Package testmodel opens real models and serves them with a real engine, for the tests of
// the packages above the engine (server, router, kvdisk, synth, model/all). Everything it makes
// is closed when the test ends. The caller's test binary registers the architectures (imports
// ubatch/model/all).
package testmodel

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"ubatch/engine"
	"ubatch/gguf"
	"ubatch/kvfile"
	"ubatch/model"
	"ubatch/runner"
)

// Open opens the model file at path.
func Open(t testing.TB, path string) *model.Model {
	t.Helper()
	m, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// Write writes w (a synth fixture, say) to the file name in t.TempDir() and returns its path.
func Write(t testing.TB, w *gguf.Writer, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Parse is the file w writes, parsed from memory.
func Parse(t testing.TB, w *gguf.Writer) *gguf.File {
	t.Helper()
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Runtime is runner.New(m.Graph, o).
func Runtime(t testing.TB, m *model.Model, o runner.Options) *runner.Runtime {
	t.Helper()
	rt, err := runner.New(m.Graph, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	return rt
}

// Session is a Session (an empty KV manager of its own) over a new Runtime(t, m, o): for
// tests that decode without an engine.
func Session(t testing.TB, m *model.Model, o runner.Options) *runner.Session {
	t.Helper()
	s, err := runner.NewSession(Runtime(t, m, o))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Engine is an engine over rt with the limits of rt's options (context, sequences, batch) and
// m's vocabulary; cfg.IsEOG nil takes m's. It runs once Run starts it.
func Engine(t testing.TB, m *model.Model, rt *runner.Runtime, cfg engine.Config) *engine.Engine {
	t.Helper()
	if cfg.IsEOG == nil {
		cfg.IsEOG = m.Vocab.IsEOG
	}
	opts := rt.Options()
	e, err := engine.New(rt, engine.Limits{NCtx: opts.NCtx, NSeqMax: opts.NSeqMax, NBatch: opts.NBatch, Vocab: m.Hparams().Vocab}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Run runs e until the test ends; stop ends Run sooner and waits for it to return. stop may be
// called more than once.
func Run(t testing.TB, e *engine.Engine) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	go e.Run(ctx)
	stop = func() { cancel(); <-e.Done() }
	t.Cleanup(stop)
	return stop
}

// Layout is the kvfile layout of rt's KV cache for m (what serve's --kv-disk and slot files
// use).
func Layout(t testing.TB, m *model.Model, rt *runner.Runtime) kvfile.Layout {
	t.Helper()
	id, err := kvfile.ModelIdentity(m.Path, m.File.DataOffset)
	if err != nil {
		t.Fatal(err)
	}
	h, cfg := rt.Hparams(), rt.KVConfig()
	// The KV cache's layers (a hybrid's attention layers alone, each at its own shape), and a
	// hybrid's state size.
	l := kvfile.Layout{Model: id, DType: cfg.DType, BlockSize: cfg.BlockSize, StateBytes: rt.StateBytes()}
	for i := range h.NKVLayers() {
		a := h.Shape(i)
		l.Layers = append(l.Layers, kvfile.Layer{KVHeads: a.NKVHeads, HeadDim: a.HeadDim})
	}
	return l
}
