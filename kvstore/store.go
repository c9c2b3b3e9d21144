// Package kvstore is the K/V memory of a paged KV cache: for every layer a K and a V array with
// one row per cell, in the cache's element type, written by the forward pass at the cells the
// KV manager (package kvcache) chose, and changed otherwise only by the store operations the
// manager decides (copies of cells, re-rotation of keys). The runner owns it; the manager never
// sees it.
package kvstore

import (
	"fmt"

	"ubatch/kvcache"
	"ubatch/kvformat"
)

// ShiftFunc re-rotates one cell's key row of layer l (the layer's row width in floats, all kv
// heads) by delta positions: the model's rope, which may differ per layer.
type ShiftFunc func(l int, k []float32, delta int32)

// Store holds the K and V rows of every cell of every layer.
//
// Layout: for every layer l, K and V arrays of NumBlocks*BlockSize rows of RowBytes(l) bytes,
// cell c's row at byte c*RowBytes(l), each row the layer's width (Config.LayerDim: KVDim, or
// KVDims[l] when layers differ) of values in the Config's format (kvformat: float32, IEEE half
// bits, or width/32 ggml Q8_0 blocks of an f16 scale and 32 int8, half the memory of F16).
//
// A Store is not safe for concurrent use; between two Apply calls its rows may be read, and
// distinct cells written, by forward-pass workers.
type Store struct {
	cfg      kvcache.Config
	f        *kvformat.Format
	shift    ShiftFunc
	k, v     [][]byte  // per layer
	rowBytes []int     // per layer
	rowBuf   []float32 // one key row as float32 (KVDim, the widest), for shifts
}

// New allocates the K/V memory for cfg (checked as kvcache.NewManager checks it, defaults
// applied) with shift re-rotating keys; shift must not be nil.
func New(cfg kvcache.Config, shift ShiftFunc) (*Store, error) {
	cfg, err := cfg.Check()
	if err != nil {
		return nil, err
	}
	if shift == nil {
		return nil, fmt.Errorf("kvstore: nil key shift function")
	}
	f := kvformat.Of(cfg.DType) // not nil: Check accepted it
	s := &Store{cfg: cfg, f: f, shift: shift, rowBuf: make([]float32, cfg.KVDim)}
	s.k, s.v, s.rowBytes = make([][]byte, cfg.NLayers), make([][]byte, cfg.NLayers), make([]int, cfg.NLayers)
	cells := cfg.NumBlocks * cfg.BlockSize
	for l := range cfg.NLayers {
		s.rowBytes[l] = f.RowBytes(cfg.LayerDim(l))
		s.k[l], s.v[l] = kvformat.Alloc(cells*s.rowBytes[l]), kvformat.Alloc(cells*s.rowBytes[l])
	}
	return s, nil
}

// Config returns the configuration, with defaults applied.
func (s *Store) Config() kvcache.Config { return s.cfg }

// Format returns the row of the store's element type in kvformat's table.
func (s *Store) Format() *kvformat.Format { return s.f }

// K returns layer's K storage, [NumBlocks*BlockSize][RowBytes(layer)] bytes (see Store), or nil
// if layer is out of range. V is the same for V.
func (s *Store) K(layer int) []byte { return at(s.k, layer) }

// V returns layer's V storage; see K.
func (s *Store) V(layer int) []byte { return at(s.v, layer) }

// RowBytes returns the bytes of one cell's K (or V) row of layer (in range): the distance
// between cells in the layer's storage.
func (s *Store) RowBytes(layer int) int { return s.rowBytes[layer] }

func at[T any](s [][]T, i int) []T {
	if i < 0 || i >= len(s) {
		return nil
	}
	return s[i]
}

// Write stores the K and V rows of n tokens (k, v: [n][the layer's width] float32) of layer in
// cells[i], converting to the store's type. len(cells) is n; every cell is in range.
func (s *Store) Write(layer int, cells []int32, k, v []float32) {
	kvDim, rb := s.cfg.LayerDim(layer), s.rowBytes[layer]
	kc, vc := s.k[layer], s.v[layer]
	for i, cell := range cells {
		c := int(cell)
		s.f.Store(kc[c*rb:(c+1)*rb], k[i*kvDim:(i+1)*kvDim])
		s.f.Store(vc[c*rb:(c+1)*rb], v[i*kvDim:(i+1)*kvDim])
	}
}
