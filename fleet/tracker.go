package fleet

import (
	"sync"
	"sync/atomic"

	"ubatch/kvcache"
	"ubatch/prefixhash"
)

// deltaQueue bounds the block changes waiting for the publisher. At one change per 16 prompt
// tokens it holds minutes of a busy node's traffic; beyond it changes are dropped (and counted),
// and the publisher rewrites the whole set from the tracker instead.
const deltaQueue = 1 << 14

// delta is one change of a node's set of routing hashes.
type delta struct {
	hash  uint64
	added bool
}

// Tracker turns a KV cache's block events (kvcache.Config.OnBlock) into the node's set of
// routing hashes, and queues the changes for a Publisher. OnBlock runs on the engine goroutine:
// it does a map update and a non-blocking channel send, and never waits for Redis.
type Tracker struct {
	mu   sync.Mutex
	byKV map[uint64]kvEntry // the cache's private hash -> routing hash and blocks holding it

	deltas  chan delta
	lost    atomic.Bool   // a change was dropped: the publisher must resync
	dropped atomic.Uint64 // changes dropped because the queue was full
}

type kvEntry struct {
	routing uint64
	refs    int32
}

// NewTracker makes a tracker; capacity (the cache's block count) pre-sizes its map.
func NewTracker(capacity int) *Tracker {
	return &Tracker{byKV: make(map[uint64]kvEntry, capacity), deltas: make(chan delta, deltaQueue)}
}

// OnBlock is the kvcache hook. A stored block whose parent is unknown (which cannot happen for
// a tracker installed from the cache's creation) is not tracked: a routing hash needs the
// parent's.
func (t *Tracker) OnBlock(ev kvcache.BlockEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch ev.Kind {
	case kvcache.BlockStored:
		if e, ok := t.byKV[ev.Hash]; ok {
			e.refs++
			t.byKV[ev.Hash] = e
			return
		}
		parent := ev.Root // prefixhash.Root, or a salted sequence's root
		if ev.Depth > 0 {
			p, ok := t.byKV[ev.Parent]
			if !ok {
				return
			}
			parent = p.routing
		}
		e := kvEntry{routing: prefixhash.Block(parent, ev.Tokens), refs: 1}
		t.byKV[ev.Hash] = e
		t.send(delta{e.routing, true})
	case kvcache.BlockRemoved:
		e, ok := t.byKV[ev.Hash]
		if !ok {
			return
		}
		if e.refs--; e.refs > 0 {
			t.byKV[ev.Hash] = e
			return
		}
		delete(t.byKV, ev.Hash)
		t.send(delta{e.routing, false})
	}
}

func (t *Tracker) send(d delta) {
	select {
	case t.deltas <- d:
	default:
		t.dropped.Add(1)
		t.lost.Store(true)
	}
}

// Snapshot returns the routing hashes of every block the cache holds now.
func (t *Tracker) Snapshot() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]uint64, 0, len(t.byKV))
	for _, e := range t.byKV {
		out = append(out, e.routing)
	}
	return out
}

// Len is the number of distinct cached blocks.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byKV)
}

// Dropped counts changes lost to a full queue.
func (t *Tracker) Dropped() uint64 { return t.dropped.Load() }
