package peer

import (
	"encoding/hex"
	"fmt"
	"strconv"

	"ubatch/kvcache"
)

// The protocol of POST /kv/blocks.
//
// Request: a JSON body (blocksRequest) naming the asker's KV identity and block size, the
// routing hashes (package prefixhash, 16 hex digits each) of the blocks it wants, from the
// prompt's first, their tokens (block_size per hash) and from, the first block to send (the
// asker holds the ones before it). The hashes are what Redis said the peer holds; the tokens
// let the peer find the blocks in its own cache (whose hashes are private to it) and are checked
// against the hashes. A salted request (kvcache.Salt) adds salt, the 64 hex digits of its
// Salt.Key, and salt_root, the 16 of its Salt.Routing: its hashes chain from salt_root, and only
// the peer's blocks of that salt are found.
//
// Answer: 200 with Content-Type ContentType and a kvfile image (kvfile.Encode: header with the
// model identity and layout, then one checksummed record per block) of the blocks from `from`
// on of the leading run the peer holds, at least one; 404 when it holds none of them; 409 when
// the identity or block size is not its own; 400 for a malformed request, naming the field.

// ContentType is the media type of an answer's body.
const ContentType = "application/x-ubatch-kv-blocks"

type blocksRequest struct {
	KVIdentity string   `json:"kv_identity"`
	BlockSize  int      `json:"block_size"`
	Hashes     []string `json:"hashes"`
	Tokens     []int32  `json:"tokens"`
	From       int      `json:"from,omitempty"`
	Salt       string   `json:"salt,omitempty"`
	SaltRoot   string   `json:"salt_root,omitempty"`
}

// encodeSalt sets the request's salt fields from s (none for the zero Salt).
func (r *blocksRequest) encodeSalt(s kvcache.Salt) {
	if s.IsZero() {
		return
	}
	r.Salt, r.SaltRoot = hex.EncodeToString(s.Key[:]), fmt.Sprintf("%016x", s.Routing)
}

// salt decodes the request's salt fields (the zero Salt when absent).
func (r *blocksRequest) salt() (kvcache.Salt, error) {
	var s kvcache.Salt
	if r.Salt == "" && r.SaltRoot == "" {
		return s, nil
	}
	k, err := hex.DecodeString(r.Salt)
	if err != nil || len(k) != len(s.Key) {
		return s, fmt.Errorf("salt %q: want %d hex digits", r.Salt, 2*len(s.Key))
	}
	copy(s.Key[:], k)
	if s.Routing, err = strconv.ParseUint(r.SaltRoot, 16, 64); err != nil || len(r.SaltRoot) != 16 || s.IsZero() {
		return kvcache.Salt{}, fmt.Errorf("salt_root %q: want 16 hex digits with a non-zero salt", r.SaltRoot)
	}
	return s, nil
}
