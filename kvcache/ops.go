package kvcache

import "ubatch/batch"

// opList is the store operations decided and not yet handed over (TakeOps, Schedule), in the
// order they were decided, and the number of the next image of a KVSave or KVLoad: images are
// numbered per hand-over (batch.KV.Images). The Manager appends to it only through these
// methods.
type opList struct {
	ops  []batch.KVOp
	nImg int32
}

// copyCells appends the copy of cells [src, src+n) to [dst, dst+n), merged into the last
// operation when it continues it.
func (l *opList) copyCells(src, dst, n int32) {
	if k := len(l.ops); k > 0 {
		o := &l.ops[k-1]
		if o.Kind == batch.KVCopy && o.Src+o.N == src && o.Dst+o.N == dst && (dst < src || dst >= src+n+o.N) {
			o.N += n
			return
		}
	}
	l.ops = append(l.ops, batch.KVOp{Kind: batch.KVCopy, Src: src, Dst: dst, N: n})
}

// shift appends the re-rotation of cell's keys by delta positions, merged into the last
// operation when it continues it with the same delta.
func (l *opList) shift(cell, delta int32) {
	if k := len(l.ops); k > 0 {
		o := &l.ops[k-1]
		if o.Kind == batch.KVShift && o.Delta == delta && o.Dst+o.N == cell {
			o.N++
			return
		}
	}
	l.ops = append(l.ops, batch.KVOp{Kind: batch.KVShift, Dst: cell, N: 1, Delta: delta})
}

// save appends the KVSave of cells [cell, cell+n) into a new image and returns its number.
func (l *opList) save(cell, n int32) int32 {
	img := l.nImg
	l.nImg++
	l.ops = append(l.ops, batch.KVOp{Kind: batch.KVSave, Src: cell, Dst: img, N: n})
	return img
}

// load appends the KVLoad of a new image into cells [cell, cell+n) and returns its number.
func (l *opList) load(cell, n int32) int32 {
	img := l.nImg
	l.nImg++
	l.ops = append(l.ops, batch.KVOp{Kind: batch.KVLoad, Src: img, Dst: cell, N: n})
	return img
}

// take appends the operations to dst and returns it; none is pending after, and the next image
// is number 0 again.
func (l *opList) take(dst []batch.KVOp) []batch.KVOp {
	dst = append(dst, l.ops...)
	l.reset()
	return dst
}

// reset drops the pending operations.
func (l *opList) reset() {
	l.ops, l.nImg = l.ops[:0], 0
}

// len is the number of pending operations.
func (l *opList) len() int { return len(l.ops) }
