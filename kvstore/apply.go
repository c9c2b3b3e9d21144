package kvstore

import (
	"fmt"

	"ubatch/batch"
)

// Apply performs ops in order (batch.KV.Ops: copies of cells and re-rotations of keys, every
// layer); ApplyImages with no images.
func (s *Store) Apply(ops []batch.KVOp) error { return s.ApplyImages(ops, nil) }

// ApplyImages performs ops in order (batch.KV.Ops: copies of cells, re-rotations of keys,
// loads of cells from images and saves of cells into them, every layer), images being
// batch.KV.Images: a KVLoad or KVSave of n cells needs an image of exactly ImageBytes(n) bytes.
// A run of consecutive shifts by the same delta is done layer by layer, so that a ShiftFunc
// that keeps its rotation table per (layer, delta) computes it once per layer. It returns an
// error, before changing anything, when an operation reaches outside the store or its image is
// missing or of the wrong size. No allocation.
func (s *Store) ApplyImages(ops []batch.KVOp, images [][]byte) error {
	nCells := int32(s.cfg.NumBlocks * s.cfg.BlockSize)
	img := func(i, n int32) bool {
		return i >= 0 && int(i) < len(images) && int64(len(images[i])) == s.ImageBytes(int(n))
	}
	for i, o := range ops {
		bad := o.N < 0 || o.Dst < 0 || o.Dst > nCells-o.N
		switch o.Kind {
		case batch.KVCopy:
			bad = bad || o.Src < 0 || o.Src > nCells-o.N
		case batch.KVShift:
		case batch.KVLoad:
			bad = bad || !img(o.Src, o.N)
		case batch.KVSave:
			bad = o.N < 0 || o.Src < 0 || o.Src > nCells-o.N || !img(o.Dst, o.N)
		default:
			bad = true
		}
		if bad {
			return fmt.Errorf("kvstore: op %d %+v outside %d cells or without its image", i, o, nCells)
		}
	}
	for i := 0; i < len(ops); {
		o := ops[i]
		switch o.Kind {
		case batch.KVCopy:
			s.copyCells(o.Src, o.Dst, o.N)
			i++
			continue
		case batch.KVLoad:
			s.LoadCells(o.Dst, o.N, images[o.Src])
			i++
			continue
		case batch.KVSave:
			s.SaveCells(o.Src, o.N, images[o.Dst])
			i++
			continue
		}
		j := i + 1
		for j < len(ops) && ops[j].Kind == batch.KVShift && ops[j].Delta == o.Delta {
			j++
		}
		if o.Delta != 0 {
			for l := range s.cfg.NLayers {
				for _, r := range ops[i:j] {
					for cell := r.Dst; cell < r.Dst+r.N; cell++ {
						s.rotateKey(l, int(cell), o.Delta)
					}
				}
			}
		}
		i = j
	}
	return nil
}

// copyCells copies the K and V rows of every layer of cells [src, src+n) to [dst, dst+n)
// (memmove: the ranges may overlap).
func (s *Store) copyCells(src, dst, n int32) {
	for l, rb := range s.rowBytes {
		a, b, m := int(src)*rb, int(dst)*rb, int(n)*rb
		copy(s.k[l][b:b+m], s.k[l][a:a+m])
		copy(s.v[l][b:b+m], s.v[l][a:a+m])
	}
}

// rotateKey re-rotates the key row of cell in layer l by delta positions, through a float32 row:
// for a quantized format one more rounding, like llama.cpp's shift of a quantized K cache.
func (s *Store) rotateKey(l, cell int, delta int32) {
	rb := s.rowBytes[l]
	row, buf := s.k[l][cell*rb:(cell+1)*rb], s.rowBuf[:s.cfg.LayerDim(l)]
	s.f.Load(buf, row)
	s.shift(l, buf, delta)
	s.f.Store(row, buf)
}
