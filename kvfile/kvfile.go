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
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"syscall"

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
}

// Equal reports whether l and o describe the same model and cache layout.
func (l Layout) Equal(o Layout) bool {
	if l.Model != o.Model || l.DType != o.DType || l.BlockSize != o.BlockSize || len(l.Layers) != len(o.Layers) {
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

// headerBytes is the encoded header of l for records records.
func headerBytes(l Layout, records int) []byte {
	h := make([]byte, 0, 4+4+32+12+8*len(l.Layers)+8)
	h = append(h, magic[:]...)
	h = binary.LittleEndian.AppendUint32(h, Version)
	h = append(h, l.Model[:]...)
	h = binary.LittleEndian.AppendUint32(h, uint32(l.DType))
	h = binary.LittleEndian.AppendUint32(h, uint32(l.BlockSize))
	h = binary.LittleEndian.AppendUint32(h, uint32(len(l.Layers)))
	for _, ly := range l.Layers {
		h = binary.LittleEndian.AppendUint32(h, uint32(ly.KVHeads))
		h = binary.LittleEndian.AppendUint32(h, uint32(ly.HeadDim))
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
	return 32 + 32 + 8 + 8*int64(cells) + int64(cells)*l.CellBytes() + 4
}

// Encode writes blocks under layout l to w. Every block must fit l (sizes, canonical
// positions).
func Encode(w io.Writer, l Layout, blocks []Block) error {
	if err := l.Check(); err != nil {
		return err
	}
	if len(blocks) > MaxRecords {
		return fmt.Errorf("kvfile: %d blocks, at most %d", len(blocks), MaxRecords)
	}
	for i := range blocks {
		if err := blocks[i].check(l); err != nil {
			return fmt.Errorf("kvfile: block %d: %w", i, err)
		}
	}
	if _, err := w.Write(headerBytes(l, len(blocks))); err != nil {
		return err
	}
	var meta []byte
	for i := range blocks {
		b := &blocks[i]
		meta = append(meta[:0], b.Key[:]...)
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
	return nil
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
	if v != Version && v != 1 {
		return l, 0, fmt.Errorf("%w: version %d, this build reads %d and 1", ErrForeign, v, Version)
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
	rest := make([]byte, 8*int(nl)+8)
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
// (0: MaxRecords).
func Decode(r io.Reader, want Layout, maxBlocks int) ([]Block, error) {
	br := bufio.NewReader(r)
	l, n, err := DecodeHeader(br)
	if err != nil {
		return nil, err
	}
	if !l.Equal(want) {
		return nil, fmt.Errorf("%w: the file's model or layout (%v, blocks of %d, %d layers) is not this cache's (%v, blocks of %d, %d layers)",
			ErrForeign, l.DType, l.BlockSize, len(l.Layers), want.DType, want.BlockSize, len(want.Layers))
	}
	if maxBlocks <= 0 {
		maxBlocks = MaxRecords
	}
	if n > maxBlocks {
		return nil, fmt.Errorf("%w: %d blocks, at most %d accepted", ErrCorrupt, n, maxBlocks)
	}
	blocks := make([]Block, 0, min(n, 1024))
	for i := range n {
		b, err := decodeRecord(br, l)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		blocks = append(blocks, b)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, fmt.Errorf("%w: bytes after the last record", ErrCorrupt)
	}
	return blocks, nil
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

func decodeRecord(r io.Reader, l Layout) (Block, error) {
	var b Block
	head, n, err := b.readHead(r, l)
	if err != nil {
		return b, err
	}
	body := make([]byte, 8*n+int(int64(n)*l.CellBytes())+4)
	if _, err := io.ReadFull(r, body); err != nil {
		return b, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	crc := crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, body[:len(body)-4])
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

// MaxName is the longest file name WriteFile can write: a file system's usual NAME_MAX (255
// bytes) less what its temporary name adds (a leading dot, a dot and up to ten random digits,
// ".tmp"). A longer name fails to be created, whatever the directory.
const MaxName = 255 - len(".") - len(".") - 10 - len(".tmp")

// WriteFile writes blocks under l to path atomically: to a temporary file in the same
// directory, then renamed over path, so a reader sees the old file, the whole new one, or none
// (a crash may leave a "*.tmp" file behind, never a torn path). Not synced to disk: a power cut
// may lose or tear the file, which the checksums then reject. path's base name must be at most
// MaxName bytes.
func WriteFile(path string, l Layout, blocks []Block) (int64, error) {
	dir, base := filepath.Split(path)
	if len(base) > MaxName {
		return 0, fmt.Errorf("kvfile: file name of %d bytes, at most %d fit with the temporary suffix", len(base), MaxName)
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return 0, err
	}
	tmp := f.Name()
	w := bufio.NewWriterSize(f, 1<<16)
	err = Encode(w, l, blocks)
	if err == nil {
		err = w.Flush()
	}
	var size int64
	if err == nil {
		size, err = f.Seek(0, io.SeekCurrent)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, err
	}
	return size, nil
}

// ErrNotRegular: the path names something other than a regular file (a FIFO, a device, a
// directory, a socket), which ReadFile does not open.
var ErrNotRegular = errors.New("kvfile: not a regular file")

// OpenRegular opens path for reading if it is a regular file: the open does not block
// (O_NONBLOCK, so a FIFO without a writer cannot hang it) and anything else is ErrNotRegular,
// checked on the opened file itself (no race with a rename). It returns the file and its
// information; the caller closes the file.
func OpenRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s is a %v", ErrNotRegular, filepath.Base(path), fi.Mode().Type())
	}
	return f, fi, nil
}

// ReadFile decodes the image at path (see Decode), a regular file only (OpenRegular). Reading
// stops with ctx's error when ctx ends.
func ReadFile(ctx context.Context, path string, want Layout, maxBlocks int) ([]Block, error) {
	f, _, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	blocks, err := Decode(ctxReader{ctx, f}, want, maxBlocks)
	if cerr := ctx.Err(); err != nil && cerr != nil {
		return nil, cerr // Decode words a failed read as corruption
	}
	return blocks, err
}

// ctxReader reads r until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
