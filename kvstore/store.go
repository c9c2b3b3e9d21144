// Package kvstore is the K/V memory of a paged KV cache: for every layer a K and a V array with
// one row per cell, in the cache's element type, written by the forward pass at the cells the
// KV manager (package kvcache) chose, and changed otherwise only by the store operations the
// manager decides (copies of cells, re-rotation of keys). The runner owns it; the manager never
// sees it.
package kvstore

import (
	"fmt"

	"ubatch/kvcache"
	"ubatch/quant"
)

// ShiftFunc re-rotates one cell's key row of layer l (KVDim floats, all kv heads) by delta
// positions: the model's rope, which may differ per layer.
type ShiftFunc func(l int, k []float32, delta int32)

// Store holds the K and V rows of every cell of every layer.
//
// Layout: for every layer, K and V arrays of shape [NumBlocks*BlockSize][KVDim], row-major (cell
// c's row starts at c*KVDim), as float32 or IEEE half (uint16 bits); or, for Q8_0, rows of
// RowBytes bytes (KVDim/32 ggml Q8_0 blocks of an f16 scale and 32 int8, 34 bytes each: cell c's
// row starts at byte c*RowBytes; half the memory of F16).
//
// A Store is not safe for concurrent use; between two Apply calls its rows may be read, and
// distinct cells written, by forward-pass workers.
type Store struct {
	cfg      kvcache.Config
	shift    ShiftFunc
	k32, v32 [][]float32
	k16, v16 [][]uint16
	k8, v8   [][]byte
	rowBytes int
	rowBuf   []float32 // one key row as float32, for shifts of F16 and Q8_0 rows
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
	s := &Store{cfg: cfg, shift: shift, rowBytes: int(cfg.DType.RowBytes(cfg.KVDim)), rowBuf: make([]float32, cfg.KVDim)}
	nCells := cfg.NumBlocks * cfg.BlockSize
	n := nCells * cfg.KVDim
	switch cfg.DType {
	case kvcache.F32:
		s.k32, s.v32 = make([][]float32, cfg.NLayers), make([][]float32, cfg.NLayers)
		for l := range cfg.NLayers {
			s.k32[l], s.v32[l] = make([]float32, n), make([]float32, n)
		}
	case kvcache.F16:
		s.k16, s.v16 = make([][]uint16, cfg.NLayers), make([][]uint16, cfg.NLayers)
		for l := range cfg.NLayers {
			s.k16[l], s.v16[l] = make([]uint16, n), make([]uint16, n)
		}
	case kvcache.Q8_0:
		s.k8, s.v8 = make([][]byte, cfg.NLayers), make([][]byte, cfg.NLayers)
		for l := range cfg.NLayers {
			s.k8[l], s.v8[l] = make([]byte, nCells*s.rowBytes), make([]byte, nCells*s.rowBytes)
		}
	}
	return s, nil
}

// Config returns the configuration, with defaults applied.
func (s *Store) Config() kvcache.Config { return s.cfg }

// KF32 returns layer's K storage, [NumBlocks*BlockSize][KVDim] row-major, or nil if the DType is
// not F32 or layer is out of range. VF32, KF16 and VF16 are the same for V and for F16 storage.
func (s *Store) KF32(layer int) []float32 { return at(s.k32, layer) }

// VF32 returns layer's V storage; see KF32.
func (s *Store) VF32(layer int) []float32 { return at(s.v32, layer) }

// KF16 returns layer's K storage as IEEE half bits; see KF32.
func (s *Store) KF16(layer int) []uint16 { return at(s.k16, layer) }

// VF16 returns layer's V storage as IEEE half bits; see KF32.
func (s *Store) VF16(layer int) []uint16 { return at(s.v16, layer) }

// KQ8 returns layer's K storage as Q8_0 blocks, [NumBlocks*BlockSize][RowBytes()] bytes, or nil
// if the DType is not Q8_0 or layer is out of range. VQ8 is the same for V.
func (s *Store) KQ8(layer int) []byte { return at(s.k8, layer) }

// VQ8 returns layer's V storage as Q8_0 blocks; see KQ8.
func (s *Store) VQ8(layer int) []byte { return at(s.v8, layer) }

// RowBytes returns the bytes of one cell's K (or V) row of one layer: the distance between cells
// in KQ8's storage, KVDim times the element size for F32 and F16.
func (s *Store) RowBytes() int { return s.rowBytes }

func at[T any](s [][]T, i int) []T {
	if i < 0 || i >= len(s) {
		return nil
	}
	return s[i]
}

// Write stores the K and V rows of n tokens (k, v: [n][KVDim] float32) of layer in cells[i],
// converting to the store's type. len(cells) is n; every cell is in range.
func (s *Store) Write(layer int, cells []int32, k, v []float32) {
	kvDim := s.cfg.KVDim
	switch s.cfg.DType {
	case kvcache.F32:
		kc, vc := s.k32[layer], s.v32[layer]
		for i, cell := range cells {
			c := int(cell)
			copy(kc[c*kvDim:(c+1)*kvDim], k[i*kvDim:(i+1)*kvDim])
			copy(vc[c*kvDim:(c+1)*kvDim], v[i*kvDim:(i+1)*kvDim])
		}
	case kvcache.Q8_0:
		kc, vc, rb := s.k8[layer], s.v8[layer], s.rowBytes
		for i, cell := range cells {
			c := int(cell)
			// The sizes are fixed by New (KVDim a multiple of 32): an error is a bug.
			if err := quant.Quantize(quant.Q8_0, k[i*kvDim:(i+1)*kvDim], kc[c*rb:(c+1)*rb]); err != nil {
				panic("kvstore: " + err.Error())
			}
			if err := quant.Quantize(quant.Q8_0, v[i*kvDim:(i+1)*kvDim], vc[c*rb:(c+1)*rb]); err != nil {
				panic("kvstore: " + err.Error())
			}
		}
	default:
		kc, vc := s.k16[layer], s.v16[layer]
		for i, cell := range cells {
			c := int(cell)
			quant.F32ToF16s(kc[c*kvDim:(c+1)*kvDim], k[i*kvDim:(i+1)*kvDim])
			quant.F32ToF16s(vc[c*kvDim:(c+1)*kvDim], v[i*kvDim:(i+1)*kvDim])
		}
	}
}
