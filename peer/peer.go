// Package peer moves KV blocks between the nodes of a fleet: a node that lacks the leading
// blocks of a prompt that another node holds fetches their K/V over HTTP instead of recomputing
// them, when the transfer is expected to be faster than the prompt's compute.
//
// Source is the peer tier as the engine sees it (an engine.BlockSource, beside the disk tier):
// when a waiting request's prefix is not all in RAM, the engine probes it (in memory: is there
// a live peer of this node's KV layout at all?), weighs ReadCost (latency + bytes / throughput,
// both measured from past fetches) against its step cost model's time for the same prompt
// tokens, and, when the transfer wins, calls Fetch on a goroutine of its own while the request
// waits. Fetch finds the peer holding the longest run of the prompt's blocks in the fleet's
// Redis (package fleet: every node publishes the routing hashes of its cached blocks, its
// advertise URL and its KV identity; Index.Holders), asks it with POST /kv/blocks (Handler, on
// the peer) authenticated with the node's API key, and verifies the answer: a kvfile image of
// this node's model identity and layout, every record's checksum, depth, tokens and chained key
// against the prompt. The engine then imports the blocks into the RAM prefix cache, and
// admission counts them as cached tokens. Any failure of a peer (down, slow, another model, a
// bad checksum, evicted meanwhile) is counted by reason and leaves the prompt to be computed: a
// fetch never fails a request.
package peer

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"ubatch/kvcache"
	"ubatch/kvfile"
)

// Exporter is the node's RAM cache as the serving side uses it (engine.Engine).
type Exporter interface {
	// ExportBlocks returns the leading full blocks of tokens the cache holds of salt, at most
	// max, with their K/V copied out.
	ExportBlocks(ctx context.Context, salt kvcache.Salt, tokens []int32, max int) ([]kvfile.Block, error)
}

// Identity names a KV layout in the fleet's Redis (fleet.Status.KVIdentity): 32 hex digits of
// SHA-256 over the model identity, the element type, the block size and every layer's shape.
// Nodes fetch blocks only from peers of their own identity; the image's header is checked
// against the full layout besides.
func Identity(l kvfile.Layout) string {
	b := append([]byte(nil), l.Model[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(l.DType))
	b = binary.LittleEndian.AppendUint32(b, uint32(l.BlockSize))
	for _, ly := range l.Layers {
		b = binary.LittleEndian.AppendUint32(b, uint32(ly.KVHeads))
		b = binary.LittleEndian.AppendUint32(b, uint32(ly.HeadDim))
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:16])
}
