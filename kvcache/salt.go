package kvcache

import (
	"crypto/sha256"
	"hash/maphash"

	"ubatch/prefixhash"
)

// Salts (vLLM's cache_salt). The prefix cache shares blocks between every prompt that starts
// alike, so a prompt's cached tokens (and its time to first token) tell its sender whether
// anyone sent the same prefix before. A salted sequence chains its hashes from its salt's roots
// instead of the zero ones, in the three chains a block has: the cache's seeded hash (matches
// in RAM), its Key (the disk tier, saved slots, peers' blocks) and its routing hash (a fleet's
// routers). No block of one salt then matches a prompt of another salt or of none, while
// prompts of the same salt share as before.

// Salt is the namespace of a sequence's prefix-cache blocks: the roots its chains start from.
// The zero Salt is no salt (RootKey, prefixhash.Root).
type Salt struct {
	Key     Key    // the parent Key of the first block
	Routing uint64 // the parent routing hash of the first block (prefixhash.Salted)
}

// saltDomain separates salt Keys from block Keys (a block's Key hashes 32 bytes of parent and
// 4 per token; a salt's hashes this prefix first).
const saltDomain = "ubatch cache_salt\x00"

// NewSalt returns the Salt of a request's cache_salt: the zero Salt for "", else roots derived
// from it, the same in every process (so that routers, peers and disk files agree).
func NewSalt(salt string) Salt {
	if salt == "" {
		return Salt{}
	}
	return Salt{Key: sha256.Sum256([]byte(saltDomain + salt)), Routing: prefixhash.Salted(salt)}
}

// IsZero reports whether s is no salt.
func (s Salt) IsZero() bool { return s.Key == RootKey }

// root returns the seeded hash the first block of a sequence salted s chains from: rootHash
// when unsalted, else a hash of the salt's Key with the cache's seed (never rootHash).
func (c *Manager) root(s Salt) uint64 {
	if s.IsZero() {
		return rootHash
	}
	var h maphash.Hash
	h.SetSeed(c.seed)
	var buf [8]byte
	for i := 0; i < len(s.Key); i += 8 {
		copy(buf[:], s.Key[i:i+8])
		h.Write(buf[:])
	}
	if r := h.Sum64(); r != rootHash {
		return r
	}
	return rootHash + 1
}
