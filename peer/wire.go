package peer

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The wire format of POST /kv/blocks.
//
// Request: a JSON body (blocksRequest) naming the asker's KV identity and block size, the
// routing hashes (package prefixhash, 16 hex digits each) of the blocks it wants, from the
// prompt's first, and their tokens (block_size per hash). The hashes are what Redis said the
// peer holds; the tokens let the peer find the blocks in its own cache (whose hashes are private
// to it) and are checked against the hashes.
//
// Answer (200, Content-Type ContentType): of the leading blocks of those the peer holds, the
// ones from block `from` on, at least one:
//
//	magic    8 bytes "ubkvpeer"
//	version  u32 = 1
//	hlen     u32, then hlen bytes of JSON: wireHeader (identity, block size, block bytes, count)
//	count ×  depth u32 | block_size × token i32 | block_bytes of K/V | crc32c u32 of the three
//
// little-endian throughout. 404 when it holds none of them, 409 when the identity or block
// size differs from its own, 400 for a malformed request.

// ContentType is the media type of an answer's body.
const ContentType = "application/x-ubatch-kv-blocks"

const (
	wireMagic   = "ubkvpeer"
	wireVersion = 1
	maxHeader   = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type blocksRequest struct {
	KVIdentity string   `json:"kv_identity"`
	BlockSize  int      `json:"block_size"`
	Hashes     []string `json:"hashes"`
	Tokens     []int32  `json:"tokens"`
	// From is the first block to send (the asker holds the ones before it): the peer matches
	// the whole chain from the prompt's start but sends blocks From onwards.
	From int `json:"from,omitempty"`
}

type wireHeader struct {
	KVIdentity string `json:"kv_identity"`
	BlockSize  int    `json:"block_size"`
	BlockBytes int64  `json:"block_bytes"`
	Blocks     int    `json:"blocks"`
}

// encodedBytes is the size of an answer of n blocks (header excluded).
func encodedBytes(n, blockSize int, blockBytes int64) int64 {
	return int64(n) * (8 + 4*int64(blockSize) + blockBytes)
}

// writeBlocks writes an answer carrying blocks.
func writeBlocks(w io.Writer, h wireHeader, blocks []Block) error {
	hj, _ := json.Marshal(h) // plain fields: cannot fail
	bw := bufio.NewWriterSize(w, 64<<10)
	var b [8]byte
	bw.WriteString(wireMagic)
	binary.LittleEndian.PutUint32(b[:4], wireVersion)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(hj)))
	bw.Write(b[:8])
	bw.Write(hj)
	for _, blk := range blocks {
		crc := crc32.New(castagnoli)
		out := io.MultiWriter(bw, crc)
		binary.LittleEndian.PutUint32(b[:4], uint32(blk.Depth))
		out.Write(b[:4])
		for _, t := range blk.Tokens {
			binary.LittleEndian.PutUint32(b[:4], uint32(t))
			out.Write(b[:4])
		}
		out.Write(blk.Data)
		binary.LittleEndian.PutUint32(b[:4], crc.Sum32())
		if _, err := bw.Write(b[:4]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// Errors of reading an answer, for the failure reasons counted.
var (
	errIdentity = errors.New("the peer's KV identity or block size differs from this node's")
	errCorrupt  = errors.New("malformed or corrupt answer")
	errTokens   = errors.New("the peer's blocks hold other tokens than the prompt's")
)

// readBlocks reads an answer to a request for blocks from..len(want)/BlockSize of want (a whole
// number of blocks of h.BlockSize tokens; h is what this node expects: its identity, block size
// and block bytes), verifying the header against h, every block's depth and tokens against want
// and its checksum. At most the blocks asked for are accepted, so the caller bounds the bytes
// read by bounding want.
func readBlocks(r io.Reader, h wireHeader, want []int32, from int) ([]Block, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var pre [16]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	if string(pre[:8]) != wireMagic || binary.LittleEndian.Uint32(pre[8:12]) != wireVersion {
		return nil, fmt.Errorf("%w: not a version %d KV block answer", errCorrupt, wireVersion)
	}
	hlen := binary.LittleEndian.Uint32(pre[12:])
	if hlen > maxHeader {
		return nil, fmt.Errorf("%w: header of %d bytes", errCorrupt, hlen)
	}
	hj := make([]byte, hlen)
	if _, err := io.ReadFull(br, hj); err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	var got wireHeader
	if err := json.Unmarshal(hj, &got); err != nil {
		return nil, fmt.Errorf("%w: header: %v", errCorrupt, err)
	}
	if got.KVIdentity != h.KVIdentity || got.BlockSize != h.BlockSize || got.BlockBytes != h.BlockBytes {
		return nil, fmt.Errorf("%w: %q, %d tokens, %d bytes per block; this node has %q, %d, %d", errIdentity,
			got.KVIdentity, got.BlockSize, got.BlockBytes, h.KVIdentity, h.BlockSize, h.BlockBytes)
	}
	bs := h.BlockSize
	if got.Blocks <= 0 || got.Blocks > len(want)/bs-from {
		return nil, fmt.Errorf("%w: %d blocks for a request of %d", errCorrupt, got.Blocks, len(want)/bs-from)
	}
	blocks := make([]Block, got.Blocks)
	rec := make([]byte, 4+4*bs+int(h.BlockBytes)+4)
	for i := range blocks {
		if _, err := io.ReadFull(br, rec); err != nil {
			return nil, fmt.Errorf("%w: block %d: %v", errCorrupt, i, err)
		}
		body := rec[:len(rec)-4]
		if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(rec[len(rec)-4:]) {
			return nil, fmt.Errorf("%w: block %d: checksum mismatch", errCorrupt, i)
		}
		depth := from + i
		if d := binary.LittleEndian.Uint32(body); d != uint32(depth) {
			return nil, fmt.Errorf("%w: block %d has depth %d", errCorrupt, depth, d)
		}
		toks := make([]int32, bs)
		for j := range toks {
			toks[j] = int32(binary.LittleEndian.Uint32(body[4+4*j:]))
			if toks[j] != want[depth*bs+j] {
				return nil, fmt.Errorf("%w (block %d)", errTokens, depth)
			}
		}
		blocks[i] = Block{Depth: int32(depth), Tokens: toks, Data: append([]byte(nil), body[4+4*bs:]...)}
	}
	return blocks, nil
}
