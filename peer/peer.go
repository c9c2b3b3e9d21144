// Package peer moves KV blocks between the nodes of a fleet: a node that lacks the leading
// blocks of a prompt that another node holds fetches their K/V over HTTP instead of recomputing
// them, when the transfer is expected to be faster than the prompt's compute.
//
// Which peer holds what comes from the fleet's Redis (package fleet: every node publishes the
// routing hashes of its cached blocks, its advertise URL and its KV identity): Fetcher looks
// the prompt's chain up with fleet.Index.Holders, weighs the transfer against the engine's
// step cost model, fetches with POST /kv/blocks (Handler, on the peer) authenticated with the
// node's API key, verifies the answer (identity, block size, every block's depth, tokens and
// checksum) and hands the blocks to the local cache (Local.Import), where admission then finds
// them as cached. Any failure of a peer (down, slow, another model, a bad checksum) ends the
// fetch, is counted, and leaves the prompt to be computed: a fetch never fails a request.
//
// The peer tier sits beside the disk tier: both bring blocks into the prefix cache through the
// engine's import before the request is admitted, so cached_tokens counts them alike.
package peer

import (
	"context"
	"time"
)

// Block is one full KV block of a prompt as it travels between nodes: block number Depth of
// the prompt (positions Depth*BlockSize onwards, in order), its BlockSize token ids, and Data,
// its cells' K and V rows of every layer in the store's own type, laid out as kvstore images
// ([layer][K, then V][cell][row bytes]).
type Block struct {
	Depth  int32
	Tokens []int32
	Data   []byte
}

// Local is the node's own KV cache as the peer tier uses it: the engine, through calls it runs
// on its goroutine between steps. Implementations must be safe for concurrent use.
type Local interface {
	// KVIdentity names what a block's K/V depends on besides its tokens (model file, KV type,
	// layout): blocks move only between nodes with equal identities.
	KVIdentity() string
	// BlockSize is the KV block size in tokens; BlockBytes the bytes of one block's Data.
	BlockSize() int
	BlockBytes() int64
	// Cached returns how many leading tokens of prompt the cache holds now.
	Cached(ctx context.Context, prompt []int32) (int, error)
	// Export returns the leading full blocks of tokens (a whole number of blocks) that the
	// cache holds, at most max of them, with their K/V copied out.
	Export(ctx context.Context, tokens []int32, max int) ([]Block, error)
	// Import adds blocks (leading blocks of prompt, in order, tokens checked by the caller) to
	// the prefix cache and returns how many leading tokens of prompt it holds afterwards.
	Import(ctx context.Context, prompt []int32, blocks []Block) (int, error)
	// PromptCost is the step cost model's time for computing n prompt tokens after cached
	// ones; false while the model is not fitted yet.
	PromptCost(cached, n int) (time.Duration, bool)
}
