package kvcache

import (
	"fmt"
	"math"

	"ubatch/kvformat"
	"ubatch/quant"
)

// perCellMeta is the bookkeeping NewManager allocates per cell: its position and its token id (int32
// each).
const perCellMeta = 4 + 4

// CellBytes returns the bytes one cell of a cache costs: a K and a V row of kvDim elements of dt
// in each of nLayers layers, plus the cell's position and token id. It fails on a non-positive
// count, an unknown dt, a Q8_0 kvDim that is not a multiple of 32, or a size beyond int64.
func CellBytes(nLayers, kvDim int, dt quant.Type) (int64, error) {
	switch {
	case nLayers <= 0:
		return 0, fmt.Errorf("kvcache: NLayers %d must be positive", nLayers)
	case kvDim <= 0:
		return 0, fmt.Errorf("kvcache: KVDim %d must be positive", kvDim)
	case kvformat.Of(dt) == nil:
		return 0, fmt.Errorf("kvcache: unsupported DType %v: use %s", dt, kvformat.Names())
	case kvformat.RowBytes(dt, kvDim) == 0:
		return 0, fmt.Errorf("kvcache: a %v cache needs a KV width that is a multiple of %d, not %d: use F16", dt, kvformat.Of(dt).Align(), kvDim)
	}
	rows, ok := mul(2*kvformat.RowBytes(dt, kvDim), int64(nLayers)) // K and V
	if !ok || rows > math.MaxInt64-perCellMeta {
		return 0, fmt.Errorf("kvcache: a cell of %d layers of %d values overflows int64 bytes", nLayers, kvDim)
	}
	return rows + perCellMeta, nil
}

// PoolBytes returns the bytes NewManager and kvstore.New allocate in proportion to the number of cells, for a cache of
// cells cells (NumBlocks*BlockSize) of nLayers layers with kvDim values per K and V row stored as
// dt: cells * CellBytes. The per-block bookkeeping (some 60 bytes a block, under 4 bytes a cell at
// the default block size) is not counted. It fails on a non-positive count, an unknown dt, more
// cells than an int32 cell index reaches (which they refuse too), or a size beyond int64: so
// callers can check a requested size against the memory they have before allocating it.
func PoolBytes(nLayers, kvDim, cells int, dt quant.Type) (int64, error) {
	per, err := CellBytes(nLayers, kvDim, dt)
	if err != nil {
		return 0, err
	}
	switch {
	case cells <= 0:
		return 0, fmt.Errorf("kvcache: %d cells: must be positive", cells)
	case cells > math.MaxInt32:
		return 0, fmt.Errorf("kvcache: %d cells exceed the int32 cell index range (at most %d)", cells, math.MaxInt32)
	}
	n, ok := mul(per, int64(cells))
	if !ok {
		return 0, fmt.Errorf("kvcache: %d cells of %d bytes overflow int64", cells, per)
	}
	return n, nil
}

// mul returns a*b for non-negative a and b, and whether it fits in an int64.
func mul(a, b int64) (int64, bool) {
	if a != 0 && b > math.MaxInt64/a {
		return 0, false
	}
	return a * b, true
}
