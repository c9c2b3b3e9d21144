package kvstore

// Images: a run of n consecutive cells' K and V rows of every layer, in the store's own type,
// as one byte slice laid out [layer][K, then V][cell][RowBytes(layer)] (kvfile.Block.Data): layer
// l's K rows after the earlier layers' 2·n rows, its V rows right after them, each row as stored (kvformat: F32 and
// F16 elements little-endian, the byte order of amd64 and arm64; Q8_0 rows ggml's blocks). A
// KVSave reads cells into an image before they are reused for other content; a KVLoad writes
// them back, in another process, after a restart, or on a peer.

// ImageBytes returns the bytes of an image of n cells: 2 × n × the sum of every layer's RowBytes.
func (s *Store) ImageBytes(n int) int64 {
	var sum int64
	for _, rb := range s.rowBytes {
		sum += int64(rb)
	}
	return 2 * int64(n) * sum
}

// SaveCells copies the K and V rows of cells [cell, cell+n) of every layer into img
// (len ImageBytes(n)). No allocation.
func (s *Store) SaveCells(cell, n int32, img []byte) {
	s.cellsImage(cell, n, img, false)
}

// LoadCells writes the K and V rows of cells [cell, cell+n) of every layer from img
// (len ImageBytes(n)). No allocation.
func (s *Store) LoadCells(cell, n int32, img []byte) {
	s.cellsImage(cell, n, img, true)
}

func (s *Store) cellsImage(cell, n int32, img []byte, load bool) {
	at := 0 // layer l's K rows in img
	for l, rb := range s.rowBytes {
		span, a := int(n)*rb, int(cell)*rb
		k, v := s.layerBytes(l)
		ik, iv := img[at:at+span], img[at+span:at+2*span]
		at += 2 * span
		if load {
			copy(k[a:a+span], ik)
			copy(v[a:a+span], iv)
		} else {
			copy(ik, k[a:a+span])
			copy(iv, v[a:a+span])
		}
	}
}

// layerBytes returns layer l's K and V storage (cell c's row at c*RowBytes).
func (s *Store) layerBytes(l int) (k, v []byte) { return s.k[l], s.v[l] }
