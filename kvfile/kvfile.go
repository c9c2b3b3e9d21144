// Package kvfile is the on-disk and on-the-wire image of KV-cache blocks: a run of blocks (their
// chained Keys, depth, tokens and positions, and their K/V rows in the cache's own type) behind
// a header naming the model and the cache layout they belong to, every part checksummed. The
// disk tier (package kvdisk) writes one block per file, a saved slot the blocks of one sequence,
// and a peer may send the same bytes over HTTP. Plain data: Encode, Decode, and file helpers
// that write atomically (temporary file, then rename).
//
// # Format (all integers little-endian)
//
//	header:  magic "UBKV" | version u32 (2) | model identity [32]byte | dtype u32 (quant.Type)
//	         | block size u32 | layers u32 | per layer: kv heads u32, head dim u32
//	         | records u32 | crc32c u32 of everything before it
//	record:  key [32]byte | parent key [32]byte | depth u32 | cells u32 (1..block size)
//	         | tokens [cells]i32 | positions [cells]i32 | data [cells × cell bytes]
//	         | crc32c u32 of the record's bytes before it
//
// A record's data is kvstore's image of its cells: for each layer its K rows then its V rows,
// cells in order, a row being kv heads × head dim elements of the dtype (F32 and F16
// little-endian, Q8_0 ggml blocks). Its size follows from the header, so a length field cannot
// lie. Positions are depth × block size + i, in order: a record that says otherwise is
// corrupt. Decode rejects a different model or layout (ErrForeign), and a short, torn or
// altered file (ErrCorrupt): nothing of it is returned.
package kvfile

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"

	"ubatch/kvcache"
	"ubatch/kvformat"
	"ubatch/quant"
)

// Version is the format version written. Version 2 names the dtype by ggml's type id
// (quant.Type, kvformat's rows: F32 0, F16 1, Q8_0 8); version 1, still read (v1Type), had
// Q8_0 as 2. A build that reads only version 1 finds a version 2 file foreign and leaves it.
const Version = 2

// v1Type maps a version 1 dtype (0 F32, 1 F16, 2 Q8_0) to its type; any other to a type that
// is no KV format, which Check refuses.
func v1Type(d uint32) quant.Type {
	if v1 := [...]quant.Type{quant.F32, quant.F16, quant.Q8_0}; d < uint32(len(v1)) {
		return v1[d]
	}
	return quant.Type(math.MaxUint32)
}

var magic = [4]byte{'U', 'B', 'K', 'V'}

// Limits on what a header may claim, so that a hostile file cannot make Decode allocate much
// before its checksums are read.
const (
	MaxLayers    = 4096
	MaxBlockSize = 4096
	MaxHeadDim   = 1 << 16
	MaxRecords   = 1 << 20
)

// Errors Decode wraps.
var (
	// ErrForeign: the file is a valid image of another model or cache layout.
	ErrForeign = errors.New("kvfile: blocks of another model or cache layout")
	// ErrCorrupt: the file is not a complete, intact image (short, torn, altered, not one).
	ErrCorrupt = errors.New("kvfile: corrupt or incomplete block image")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ModelID identifies a model file: SHA-256 over its GGUF header, metadata and tensor infos
// (the bytes before the tensor data) followed by the file size as 8 bytes little-endian. It
// reads only the header (kilobytes to a few megabytes, not gigabytes of weights), and any change
// to a hyper-parameter, the vocabulary, a tensor's type, shape or offset, or the size changes it;
// two files that differ only inside tensor data of the same size would collide (a re-quantized
// or fine-tuned model changes its metadata or types in practice).
type ModelID [32]byte

// ModelIdentity computes the ModelID of the GGUF file at path whose tensor data starts at
// dataOffset.
func ModelIdentity(path string, dataOffset uint64) (ModelID, error) {
	f, err := os.Open(path)
	if err != nil {
		return ModelID{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ModelID{}, err
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, int64(min(dataOffset, uint64(fi.Size())))); err != nil {
		return ModelID{}, fmt.Errorf("kvfile: reading %s for its identity: %w", path, err)
	}
	var sz [8]byte
	binary.LittleEndian.PutUint64(sz[:], uint64(fi.Size()))
	h.Write(sz[:])
	var id ModelID
	h.Sum(id[:0])
	return id, nil
}

// Layer is one layer's K/V shape: KVHeads × HeadDim elements per row.
type Layer struct{ KVHeads, HeadDim int }

// Layout is what a block image belongs to: the model, the element type, the block size and
// each layer's shape. Two layouts must be Equal for blocks to move between them.
type Layout struct {
	Model     ModelID
	DType     quant.Type
	BlockSize int
	Layers    []Layer
	// StateBytes is one recurrent state's size for a hybrid model (a State record's data), 0
	// for a model without one. A layout with states is written as version 3 (state.go).
	StateBytes int
}

// Equal reports whether l and o describe the same model and cache layout.
func (l Layout) Equal(o Layout) bool {
	if l.Model != o.Model || l.DType != o.DType || l.BlockSize != o.BlockSize || len(l.Layers) != len(o.Layers) || l.StateBytes != o.StateBytes {
		return false
	}
	for i := range l.Layers {
		if l.Layers[i] != o.Layers[i] {
			return false
		}
	}
	return true
}

// Check reports a layout kvfile cannot describe.
func (l Layout) Check() error {
	switch {
	case l.BlockSize <= 0 || l.BlockSize > MaxBlockSize:
		return fmt.Errorf("kvfile: block size %d outside [1, %d]", l.BlockSize, MaxBlockSize)
	case len(l.Layers) == 0 || len(l.Layers) > MaxLayers:
		return fmt.Errorf("kvfile: %d layers outside [1, %d]", len(l.Layers), MaxLayers)
	case kvformat.Of(l.DType) == nil:
		return fmt.Errorf("kvfile: unknown dtype %v", l.DType)
	case l.StateBytes < 0 || l.StateBytes > MaxStateBytes:
		return fmt.Errorf("kvfile: state of %d bytes outside [0, %d]", l.StateBytes, MaxStateBytes)
	}
	for i, ly := range l.Layers {
		if ly.KVHeads <= 0 || ly.HeadDim <= 0 || ly.KVHeads*ly.HeadDim > MaxHeadDim || kvformat.RowBytes(l.DType, ly.KVHeads*ly.HeadDim) == 0 {
			return fmt.Errorf("kvfile: layer %d: %d kv heads of %d is not a %v row", i, ly.KVHeads, ly.HeadDim, l.DType)
		}
	}
	return nil
}

// CellBytes returns the data bytes of one cell: a K and a V row in every layer.
func (l Layout) CellBytes() int64 {
	var n int64
	for _, ly := range l.Layers {
		n += 2 * kvformat.RowBytes(l.DType, ly.KVHeads*ly.HeadDim)
	}
	return n
}

// Block is one block's image: its Key and its parent's (at Depth 0 its salt's Key:
// kvcache.RootKey unsalted, see kvcache.Salt), its index
// in its sequence, its tokens and positions (len 1..BlockSize, positions Depth*BlockSize+i) and
// Data, len(Tokens) × CellBytes bytes (kvstore's image layout, see the package doc).
type Block struct {
	Key, Parent kvcache.Key
	Depth       int32
	Tokens, Pos []int32
	Data        []byte
}

// check verifies b against l: sizes, canonical positions, its key.
func (b *Block) check(l Layout) error {
	if int64(len(b.Data)) != int64(len(b.Tokens))*l.CellBytes() {
		return fmt.Errorf("%w: %d data bytes for %d cells of %d", ErrCorrupt, len(b.Data), len(b.Tokens), l.CellBytes())
	}
	return b.checkMeta(l)
}

// checkMeta is check but for the data's size.
func (b *Block) checkMeta(l Layout) error {
	n := len(b.Tokens)
	switch {
	case n == 0 || n > l.BlockSize:
		return fmt.Errorf("%w: a block of %d cells (block size %d)", ErrCorrupt, n, l.BlockSize)
	case len(b.Pos) != n:
		return fmt.Errorf("%w: %d tokens but %d positions", ErrCorrupt, n, len(b.Pos))
	case b.Depth < 0 || int64(b.Depth+1)*int64(l.BlockSize) > math.MaxInt32:
		return fmt.Errorf("%w: depth %d", ErrCorrupt, b.Depth)
	}
	for i, p := range b.Pos {
		if p != b.Depth*int32(l.BlockSize)+int32(i) {
			return fmt.Errorf("%w: cell %d of block %d at position %d", ErrCorrupt, i, b.Depth, p)
		}
	}
	if kvcache.ChainKey(b.Parent, b.Tokens) != b.Key {
		return fmt.Errorf("%w: block %d's key is not its parent's and tokens' hash", ErrCorrupt, b.Depth)
	}
	return nil
}

// headerBytes is the encoded header of l for records records: version 2, or 3 with the state
// size for a layout with states.
func headerBytes(l Layout, records int) []byte {
	h := make([]byte, 0, 4+4+32+12+8*len(l.Layers)+12)
	h = append(h, magic[:]...)
	h = binary.LittleEndian.AppendUint32(h, l.version())
	h = append(h, l.Model[:]...)
	h = binary.LittleEndian.AppendUint32(h, uint32(l.DType))
	h = binary.LittleEndian.AppendUint32(h, uint32(l.BlockSize))
	h = binary.LittleEndian.AppendUint32(h, uint32(len(l.Layers)))
	for _, ly := range l.Layers {
		h = binary.LittleEndian.AppendUint32(h, uint32(ly.KVHeads))
		h = binary.LittleEndian.AppendUint32(h, uint32(ly.HeadDim))
	}
	if l.StateBytes > 0 {
		h = binary.LittleEndian.AppendUint32(h, uint32(l.StateBytes))
	}
	h = binary.LittleEndian.AppendUint32(h, uint32(records))
	return binary.LittleEndian.AppendUint32(h, crc32.Checksum(h, castagnoli))
}

// Size returns the encoded size of blocks under l.
func Size(l Layout, blocks []Block) int64 {
	n := int64(len(headerBytes(l, len(blocks))))
	for _, b := range blocks {
		n += recordSize(l, len(b.Tokens))
	}
	return n
}

func recordSize(l Layout, cells int) int64 {
	return int64(l.kindBytes()) + 32 + 32 + 8 + 8*int64(cells) + int64(cells)*l.CellBytes() + 4
}

// Encode writes blocks under layout l to w. Every block must fit l (sizes, canonical
// positions).
func Encode(w io.Writer, l Layout, blocks []Block) error { return EncodeImage(w, l, blocks, nil) }

// EncodeImage writes blocks and then states under layout l to w. Every block must fit l;
// states need a layout with states (StateBytes > 0), each of them fitting it.
func EncodeImage(w io.Writer, l Layout, blocks []Block, states []State) error {
	if err := l.Check(); err != nil {
		return err
	}
	if len(blocks)+len(states) > MaxRecords {
		return fmt.Errorf("kvfile: %d records, at most %d", len(blocks)+len(states), MaxRecords)
	}
	for i := range blocks {
		if err := blocks[i].check(l); err != nil {
			return fmt.Errorf("kvfile: block %d: %w", i, err)
		}
	}
	for i := range states {
		if err := states[i].check(l); err != nil {
			return fmt.Errorf("kvfile: state %d: %w", i, err)
		}
	}
	if _, err := w.Write(headerBytes(l, len(blocks)+len(states))); err != nil {
		return err
	}
	var meta []byte
	for i := range blocks {
		b := &blocks[i]
		meta = l.appendKind(meta[:0], kindBlock)
		meta = append(meta, b.Key[:]...)
		meta = append(meta, b.Parent[:]...)
		meta = binary.LittleEndian.AppendUint32(meta, uint32(b.Depth))
		meta = binary.LittleEndian.AppendUint32(meta, uint32(len(b.Tokens)))
		for _, t := range b.Tokens {
			meta = binary.LittleEndian.AppendUint32(meta, uint32(t))
		}
		for _, p := range b.Pos {
			meta = binary.LittleEndian.AppendUint32(meta, uint32(p))
		}
		crc := crc32.Update(crc32.Checksum(meta, castagnoli), castagnoli, b.Data)
		if _, err := w.Write(meta); err != nil {
			return err
		}
		if _, err := w.Write(b.Data); err != nil {
			return err
		}
		if _, err := w.Write(binary.LittleEndian.AppendUint32(nil, crc)); err != nil {
			return err
		}
	}
	return encodeStates(w, states)
}

// DecodeHeader reads and checks a header: its checksum, version and limits. It returns the
// layout the file claims and its record count; ErrCorrupt wraps any failure.
func DecodeHeader(r io.Reader) (Layout, int, error) {
	var l Layout
	fixed := make([]byte, 4+4+32+12)
	if _, err := io.ReadFull(r, fixed); err != nil {
		return l, 0, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	if [4]byte(fixed[:4]) != magic {
		return l, 0, fmt.Errorf("%w: not a ubatch KV block file", ErrCorrupt)
	}
	le := binary.LittleEndian
	v := le.Uint32(fixed[4:])
	if v != Version && v != 1 && v != VersionStates {
		return l, 0, fmt.Errorf("%w: version %d, this build reads %d, %d and 1", ErrForeign, v, VersionStates, Version)
	}
	copy(l.Model[:], fixed[8:40])
	l.DType = quant.Type(le.Uint32(fixed[40:]))
	if v == 1 {
		l.DType = v1Type(le.Uint32(fixed[40:]))
	}
	bs, nl := le.Uint32(fixed[44:]), le.Uint32(fixed[48:])
	if bs == 0 || bs > MaxBlockSize || nl == 0 || nl > MaxLayers {
		return l, 0, fmt.Errorf("%w: block size %d, %d layers", ErrCorrupt, bs, nl)
	}
	l.BlockSize = int(bs)
	extra := 0 // version 3's state size
	if v == VersionStates {
		extra = 4
	}
	rest := make([]byte, 8*int(nl)+extra+8)
	if _, err := io.ReadFull(r, rest); err != nil {
		return l, 0, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	all := append(fixed, rest[:len(rest)-4]...)
	if crc32.Checksum(all, castagnoli) != le.Uint32(rest[len(rest)-4:]) {
		return l, 0, fmt.Errorf("%w: header checksum", ErrCorrupt)
	}
	l.Layers = make([]Layer, nl)
	for i := range l.Layers {
		l.Layers[i] = Layer{KVHeads: int(le.Uint32(rest[8*i:])), HeadDim: int(le.Uint32(rest[8*i+4:]))}
	}
	n := le.Uint32(rest[len(rest)-8:])
	if extra > 0 {
		sb := le.Uint32(rest[8*nl:])
		if sb == 0 || sb > MaxStateBytes {
			return l, 0, fmt.Errorf("%w: states of %d bytes", ErrCorrupt, sb)
		}
		l.StateBytes = int(sb)
	}
	if err := l.Check(); err != nil {
		return l, 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if n > MaxRecords {
		return l, 0, fmt.Errorf("%w: %d records", ErrCorrupt, n)
	}
	return l, int(n), nil
}

// Decode reads a whole image written by Encode and returns its blocks, which must be of layout
// want (ErrForeign otherwise) and intact (ErrCorrupt otherwise: every checksum, size and
// position verified, nothing after the last record). maxBlocks bounds the records accepted
// (0: MaxRecords). An image with states (EncodeImage) is ErrForeign: use DecodeImage.
func Decode(r io.Reader, want Layout, maxBlocks int) ([]Block, error) {
	blocks, states, err := DecodeImage(r, want, maxBlocks)
	if err == nil && len(states) > 0 {
		return nil, fmt.Errorf("%w: the image holds %d recurrent states besides its blocks", ErrForeign, len(states))
	}
	return blocks, err
}

// DecodeImage is Decode for an image that may hold states after its blocks (EncodeImage):
// it returns both. maxBlocks bounds the records of either kind.
func DecodeImage(r io.Reader, want Layout, maxBlocks int) ([]Block, []State, error) {
	br := bufio.NewReader(r)
	l, n, err := DecodeHeader(br)
	if err != nil {
		return nil, nil, err
	}
	if !l.Equal(want) {
		return nil, nil, fmt.Errorf("%w: the file's model or layout (%v, blocks of %d, %d layers) is not this cache's (%v, blocks of %d, %d layers)",
			ErrForeign, l.DType, l.BlockSize, len(l.Layers), want.DType, want.BlockSize, len(want.Layers))
	}
	if maxBlocks <= 0 {
		maxBlocks = MaxRecords
	}
	if n > maxBlocks {
		return nil, nil, fmt.Errorf("%w: %d blocks, at most %d accepted", ErrCorrupt, n, maxBlocks)
	}
	blocks := make([]Block, 0, min(n, 1024))
	var states []State
	for i := range n {
		kind, err := l.readKind(br)
		if err == nil && kind == kindBlock && len(states) > 0 {
			err = fmt.Errorf("%w: a block after the states", ErrCorrupt)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("record %d: %w", i, err)
		}
		if kind == kindState {
			// A state ends one of the blocks before it, each at most once and in order: more
			// states than blocks is corrupt before its bytes are read (and allocated).
			if len(states) == len(blocks) {
				return nil, nil, fmt.Errorf("record %d: %w: more recurrent states than blocks", i, ErrCorrupt)
			}
			st, err := decodeState(br, l)
			if err == nil && len(states) > 0 && st.Pos <= states[len(states)-1].Pos {
				err = fmt.Errorf("%w: a state at %d after one at %d", ErrCorrupt, st.Pos, states[len(states)-1].Pos)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("record %d: %w", i, err)
			}
			states = append(states, st)
			continue
		}
		b, err := decodeRecord(br, l, l.appendKind(nil, kind))
		if err != nil {
			return nil, nil, fmt.Errorf("record %d: %w", i, err)
		}
		blocks = append(blocks, b)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, nil, fmt.Errorf("%w: bytes after the last record", ErrCorrupt)
	}
	return blocks, states, nil
}

// DecodeMeta reads the header and the first record's key, parent, depth, tokens and positions
// of an image of one block of layout want, without its data or checksum (which Decode checks):
// for indexing a directory of block files cheaply.
func DecodeMeta(r io.Reader, want Layout) (Block, error) {
	br := bufio.NewReader(r)
	l, n, err := DecodeHeader(br)
	if err != nil {
		return Block{}, err
	}
	if !l.Equal(want) {
		return Block{}, fmt.Errorf("%w: another model or cache layout", ErrForeign)
	}
	if n != 1 {
		return Block{}, fmt.Errorf("%w: %d records in a block file", ErrCorrupt, n)
	}
	if kind, err := l.readKind(br); err != nil || kind != kindBlock {
		return Block{}, fmt.Errorf("%w: a block file's record is no block (%v)", ErrCorrupt, err)
	}
	var b Block
	_, cells, err := b.readHead(br, l)
	if err != nil {
		return b, err
	}
	meta := make([]byte, 8*cells)
	if _, err := io.ReadFull(br, meta); err != nil {
		return b, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	b.setTokens(meta, cells)
	if err := b.checkMeta(l); err != nil {
		return b, err
	}
	return b, nil
}

// decodeRecord reads a block record after its kind, whose bytes pre the checksum covers too.
func decodeRecord(r io.Reader, l Layout, pre []byte) (Block, error) {
	var b Block
	head, n, err := b.readHead(r, l)
	if err != nil {
		return b, err
	}
	body := make([]byte, 8*n+int(int64(n)*l.CellBytes())+4)
	if _, err := io.ReadFull(r, body); err != nil {
		return b, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	crc := crc32.Update(crc32.Update(crc32.Checksum(pre, castagnoli), castagnoli, head), castagnoli, body[:len(body)-4])
	if crc != binary.LittleEndian.Uint32(body[len(body)-4:]) {
		return b, fmt.Errorf("%w: record checksum", ErrCorrupt)
	}
	b.setTokens(body, n)
	b.Data = body[8*n : len(body)-4 : len(body)-4]
	if err := b.check(l); err != nil {
		return b, err
	}
	return b, nil
}

// readHead reads a record's fixed 72-byte head (key, parent, depth, cell count) into b and
// returns it (the checksum covers it) with the cell count, checked against l's block size.
func (b *Block) readHead(r io.Reader, l Layout) (head []byte, cells int, err error) {
	head = make([]byte, 72)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	le := binary.LittleEndian
	copy(b.Key[:], head[:32])
	copy(b.Parent[:], head[32:64])
	b.Depth = int32(le.Uint32(head[64:]))
	n := le.Uint32(head[68:])
	if n == 0 || n > uint32(l.BlockSize) || b.Depth < 0 {
		return nil, 0, fmt.Errorf("%w: %d cells at depth %d", ErrCorrupt, n, b.Depth)
	}
	return head, int(n), nil
}

// setTokens sets b's n tokens and positions from meta: n token ids, then n positions, each a
// little-endian uint32.
func (b *Block) setTokens(meta []byte, n int) {
	le := binary.LittleEndian
	b.Tokens, b.Pos = make([]int32, n), make([]int32, n)
	for i := range n {
		b.Tokens[i] = int32(le.Uint32(meta[4*i:]))
		b.Pos[i] = int32(le.Uint32(meta[4*(n+i):]))
	}
}
