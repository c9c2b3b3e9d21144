package kvstore

import (
	"fmt"

	"ubatch/batch"
	"ubatch/quant"
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
	kv := s.cfg.KVDim
	a, b, m := int(src)*kv, int(dst)*kv, int(n)*kv
	for l := range s.k32 {
		copy(s.k32[l][b:b+m], s.k32[l][a:a+m])
		copy(s.v32[l][b:b+m], s.v32[l][a:a+m])
	}
	for l := range s.k16 {
		copy(s.k16[l][b:b+m], s.k16[l][a:a+m])
		copy(s.v16[l][b:b+m], s.v16[l][a:a+m])
	}
	rb := s.rowBytes
	a, b, m = int(src)*rb, int(dst)*rb, int(n)*rb
	for l := range s.k8 {
		copy(s.k8[l][b:b+m], s.k8[l][a:a+m])
		copy(s.v8[l][b:b+m], s.v8[l][a:a+m])
	}
}

// rotateKey re-rotates the key row of cell in layer l by delta positions, through a float32 row
// for F16 and Q8_0 storage.
func (s *Store) rotateKey(l, cell int, delta int32) {
	kv := s.cfg.KVDim
	switch {
	case s.k32 != nil:
		s.shift(l, s.k32[l][cell*kv:(cell+1)*kv], delta)
	case s.k16 != nil:
		row := s.k16[l][cell*kv : (cell+1)*kv]
		quant.F16ToF32s(s.rowBuf, row)
		s.shift(l, s.rowBuf, delta)
		quant.F32ToF16s(row, s.rowBuf)
	default:
		// Dequantize, rotate, requantize: one more rounding to 8 bits, like llama.cpp's shift
		// of a quantized K cache.
		rb := s.rowBytes
		row := s.k8[l][cell*rb : (cell+1)*rb]
		if err := quant.Dequantize(quant.Q8_0, row, s.rowBuf); err != nil {
			panic("kvstore: " + err.Error()) // sizes are fixed by New
		}
		s.shift(l, s.rowBuf, delta)
		if err := quant.Quantize(quant.Q8_0, s.rowBuf, row); err != nil {
			panic("kvstore: " + err.Error())
		}
	}
}
