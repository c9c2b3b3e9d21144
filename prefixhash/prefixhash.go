// Package prefixhash defines the routing hash of KV-cache blocks: a deterministic chained hash
// that every node of a fleet and every router compute alike, so that a router can tell from a
// prompt's tokens which nodes hold its leading blocks in their prefix caches.
//
// # Definition
//
// A prompt of token ids t[0..n) is cut into full blocks of B tokens (B = the node's KV block
// size, 16 by default); a trailing partial block has no hash. Block i (0-based) covers
// t[i*B : (i+1)*B] and its hash is
//
//	h[i] = xxhash64( le64(h[i-1]) || le32(t[i*B]) || ... || le32(t[i*B+B-1]) ),  h[-1] = 0
//
// where le64/le32 are little-endian encodings (a token id as its uint32 bit pattern) and xxhash64
// is XXH64 with seed 0. The hash of block i thus names the whole prefix t[0 : (i+1)*B]. It is
// independent of the process, unlike the kvcache's own (randomly seeded) hashes, which stay
// private to each cache. The block size is part of the definition: hashes computed with
// different B never match.
package prefixhash

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Root is the parent hash of a sequence's first block.
const Root uint64 = 0

// Block returns the routing hash of a block whose tokens are toks, chained to its parent block's
// hash (Root for the first block). It allocates nothing.
func Block(parent uint64, toks []int32) uint64 {
	var d xxhash.Digest
	d.Reset()
	var buf [64]byte
	binary.LittleEndian.PutUint64(buf[:8], parent)
	n := 8
	for _, t := range toks {
		if n == len(buf) {
			d.Write(buf[:n])
			n = 0
		}
		binary.LittleEndian.PutUint32(buf[n:], uint32(t))
		n += 4
	}
	d.Write(buf[:n])
	return d.Sum64()
}

// Chain appends to dst the routing hashes of the full blocks of tokens (len(tokens)/blockSize of
// them) and returns it. blockSize must be positive; a non-positive one yields no hashes.
func Chain(dst []uint64, tokens []int32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	h := Root
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		h = Block(h, tokens[i:i+blockSize])
		dst = append(dst, h)
	}
	return dst
}
