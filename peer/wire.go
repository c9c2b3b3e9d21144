package peer

// The protocol of POST /kv/blocks.
//
// Request: a JSON body (blocksRequest) naming the asker's KV identity and block size, the
// routing hashes (package prefixhash, 16 hex digits each) of the blocks it wants, from the
// prompt's first, their tokens (block_size per hash) and from, the first block to send (the
// asker holds the ones before it). The hashes are what Redis said the peer holds; the tokens
// let the peer find the blocks in its own cache (whose hashes are private to it) and are checked
// against the hashes.
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
}
