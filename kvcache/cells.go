package kvcache

// cellState is the state of every cell, indexed by cell id (block b's cells are
// [b·BlockSize, (b+1)·BlockSize)), in the manner of llama.cpp's llama_kv_cells: the position
// the cell holds (-1 = empty) and its token id (meaningful when not empty). The Manager reads
// and writes them only through these methods; the store holds the cells' K and V.
type cellState struct {
	ps []int32 // position per cell, -1 = empty
	ts []int32 // token per cell
}

func newCellState(n int) cellState {
	return cellState{ps: make([]int32, n), ts: make([]int32, n)}
}

// n is the number of cells.
func (s *cellState) n() int { return len(s.ps) }

// in reports whether cell is a cell id.
func (s *cellState) in(cell int32) bool { return cell >= 0 && int(cell) < len(s.ps) }

// pos is cell's position, -1 when it is empty.
func (s *cellState) pos(cell int32) int32 { return s.ps[cell] }

// tok is cell's token id.
func (s *cellState) tok(cell int32) int32 { return s.ts[cell] }

// set gives cell position p and token t.
func (s *cellState) set(cell, p, t int32) { s.ps[cell], s.ts[cell] = p, t }

// move gives cell position p, keeping its token (a shift).
func (s *cellState) move(cell, p int32) { s.ps[cell] = p }

// empty marks cell empty.
func (s *cellState) empty(cell int32) { s.ps[cell] = -1 }

// emptyRange marks cells [cell, cell+n) empty.
func (s *cellState) emptyRange(cell, n int32) {
	r := s.ps[cell : cell+n]
	for i := range r {
		r[i] = -1
	}
}

// copyRange copies the positions and tokens of cells [src, src+n) to [dst, dst+n).
func (s *cellState) copyRange(src, dst, n int32) {
	copy(s.ps[dst:dst+n], s.ps[src:src+n])
	copy(s.ts[dst:dst+n], s.ts[src:src+n])
}

// tokens is the token ids of cells [cell, cell+n), a view valid until they change.
func (s *cellState) tokens(cell, n int32) []int32 { return s.ts[cell : cell+n : cell+n] }

// positions is every cell's position, a read-only view (batch.KV.CellPos).
func (s *cellState) positions() []int32 { return s.ps }

// canonical reports whether cells [cell, cell+n) hold positions first, first+1, ...
func (s *cellState) canonical(cell, n, first int32) bool {
	for j := range n {
		if s.ps[cell+j] != first+j {
			return false
		}
	}
	return true
}

// leading counts the leading cells from cell on that hold toks at positions first, first+1, ...
func (s *cellState) leading(cell, first int32, toks []int32) int {
	m := 0
	for m < len(toks) && s.ts[cell+int32(m)] == toks[m] && s.ps[cell+int32(m)] == first+int32(m) {
		m++
	}
	return m
}
