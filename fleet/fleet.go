// Package fleet is the state a fleet of ubatch nodes shares through Redis: each node publishes
// the routing hashes (package prefixhash) of the KV blocks in its prefix cache and its load;
// routers read them to send a request to the node that already holds the longest prefix of its
// prompt.
//
// # Redis layout
//
// With namespace NS (default "ubatch"):
//
//	NS:nodes              SET of node ids (members whose status key is gone are dead: ignored)
//	NS:node:ID            STRING, the node's Status as JSON, with a TTL (the heartbeat)
//	NS:node:ID:blocks     SET of the node's cached blocks, each its routing hash as 16 lowercase
//	                      hex digits, with the same TTL
//
// The same two keys answer a node's question "which peer holds the KV blocks of this prompt, and
// where do I fetch them": a block's routing hash names its whole prefix, the status carries the
// URL peers use (the node's --advertise-url, the one routers use too), and its KV identity
// (model file, KV type and layout): see Index.Holders. There is no second registry.
//
// A node refreshes both TTLs every heartbeat, so a node that dies disappears within one TTL.
// It writes block changes in batches and rewrites its whole set after a Redis failure, after a
// restart of Redis (its key vanished) and periodically, so that Redis converges to the node's
// cache whatever was lost in between.
package fleet

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultNamespace prefixes every key when Options.Namespace is empty.
const DefaultNamespace = "ubatch"

// Status is what a node publishes about itself, as JSON under NS:node:ID.
type Status struct {
	ID         string `json:"id"`
	URL        string `json:"url"`   // base URL routers send requests to
	Model      string `json:"model"` // model id the node's API reports
	BlockSize  int    `json:"block_size"`
	MaxBody    int64  `json:"max_body"` // largest request body the node accepts, bytes
	MaxRunning int    `json:"max_running"`
	Load
	Blocks int `json:"blocks"` // cached blocks published
	// KVIdentity names what a KV block of this node holds beyond its tokens: the model file,
	// the KV element type and layout. Peers fetch blocks only from nodes with their own
	// identity; "" (a node that does not serve POST /kv/blocks) is never a peer.
	KVIdentity string `json:"kv_identity,omitempty"`
	TimeMS     int64  `json:"time_ms"` // Unix time of the heartbeat, milliseconds
}

// RunBound is how many sequences the node runs at most now: its live bound when it reports
// one (Load.Bound), else MaxRunning; 0 when neither is known.
func (s *Status) RunBound() int {
	if s.Bound > 0 && (s.MaxRunning <= 0 || s.Bound <= s.MaxRunning) {
		return s.Bound
	}
	return s.MaxRunning
}

// Load is a node's current load.
type Load struct {
	Running int `json:"running"` // sequences decoding or prefilling
	Waiting int `json:"waiting"` // requests queued for admission
	// Bound is how many sequences the node runs at most now (at most Status.MaxRunning: its
	// adaptive parallelism, by KV room and inter-token target); 0 = not reported.
	Bound    int `json:"bound,omitempty"`
	KVTotal  int `json:"kv_total"`  // KV blocks
	KVFree   int `json:"kv_free"`   // blocks holding nothing
	KVCached int `json:"kv_cached"` // blocks kept only for prefix reuse (evictable)
}

// keys names a namespace's Redis keys.
type keys struct{ ns string }

func newKeys(ns string) keys {
	if ns == "" {
		ns = DefaultNamespace
	}
	return keys{ns}
}

func (k keys) nodes() string               { return k.ns + ":nodes" }
func (k keys) status(id string) string     { return k.ns + ":node:" + id }
func (k keys) blocks(id string) string     { return k.ns + ":node:" + id + ":blocks" }
func hashMember(h uint64) string           { return fmt.Sprintf("%016x", h) }
func parseMember(s string) (uint64, error) { return strconv.ParseUint(s, 16, 64) }

// NewClient makes a Redis client for a redis:// or rediss:// URL with short timeouts and no
// retries of its own: callers on a serving path must fail fast when Redis is away and retry on
// their own schedule.
func NewClient(rawURL string) (*redis.Client, error) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("--redis %q: %w (want redis://[:PASSWORD@]HOST:PORT[/DB])", redactURL(rawURL), err)
	}
	opt.DialTimeout = 500 * time.Millisecond
	opt.ReadTimeout = 500 * time.Millisecond
	opt.WriteTimeout = 500 * time.Millisecond
	opt.MaxRetries = -1 // none
	opt.DialerRetries = 1
	opt.PoolSize = 8
	opt.DisableIdentity = true
	return redis.NewClient(opt), nil
}

// redactURL hides a password in a Redis URL for error messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// ping checks that Redis answers, within d.
func ping(ctx context.Context, rdb *redis.Client, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return rdb.Ping(ctx).Err()
}
