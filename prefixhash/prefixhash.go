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
// is XXH64 with seed 0. A salted request (vLLM's cache_salt) starts its chain from the salt's
// root instead, h[-1] = Salted(salt), so that no hash of one salt equals one of another salt or
// of none. The hash of block i thus names the whole prefix t[0 : (i+1)*B]. It is
// independent of the process, unlike the kvcache's own (randomly seeded) hashes, which stay
// private to each cache. The block size is part of the definition: hashes computed with
// different B never match.
package prefixhash

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Root is the parent hash of a sequence's first block.
const Root uint64 = 0

// saltDomain separates salt roots from every other use of XXH64 over strings.
const saltDomain = "ubatch cache_salt\x00"

// TenantSalt is the salt of a request with cache_salt salt sent with bearer token token, on a
// server that salts by key (serve and route --cache-salt-per-key): the token's SHA-256 and the
// salt, so that no client reaches another token's namespace by choosing its cache_salt, and the
// router's routing hashes chain from the root the nodes' do. Without a token it is salt.
func TenantSalt(token, salt string) string {
	if token == "" {
		return salt
	}
	h := sha256.Sum256([]byte("ubatch tenant\x00" + token))
	return string(h[:]) + "\x00" + salt
}

// Salted returns the root of the chain of a request salted with salt: Root for "" (no salt),
// else XXH64 of a domain prefix and the salt, never Root.
func Salted(salt string) uint64 {
	if salt == "" {
		return Root
	}
	var d xxhash.Digest
	d.Reset()
	d.WriteString(saltDomain)
	d.WriteString(salt)
	if h := d.Sum64(); h != Root {
		return h
	}
	return 1
}

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
	return ChainFrom(dst, Root, tokens, blockSize)
}

// ChainFrom is Chain for a chain that starts from root (Salted's, for a salted request).
func ChainFrom(dst []uint64, root uint64, tokens []int32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	h := root
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		h = Block(h, tokens[i:i+blockSize])
		dst = append(dst, h)
	}
	return dst
}
