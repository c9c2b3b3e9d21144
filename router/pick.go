package router

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"ubatch/prefixhash"
)

// candidate is a node scored for one request.
type candidate struct {
	snapshot
	cached int // prompt tokens the node holds (index or recent affinity)
	load   int
	score  float64
}

// decision is the ordered list of nodes to try for a request, and why the first was chosen.
type decision struct {
	order     []candidate
	reason    string
	maxCached int
}

// decide scores the healthy nodes that accept a body of bodyLen bytes for a prompt (nil for
// routes without one), best first.
//
// A node's score is its cached prefix in tokens minus LoadWeight tokens per request it is
// busy with, load = max(requests this router has in flight there, its published running +
// waiting), and QueueWeight tokens more per request beyond its published max_running: below
// capacity another sequence only shares the node's batches, beyond it a request waits for a
// whole generation. So routing follows the cache until its node queues requests that another
// could start at once, then spills, and the spilled-to node caches the prefix too (a hot prefix
// ends up on several nodes). Equal scores rotate, so that least-loaded routing spreads.
func (r *Router) decide(ctx context.Context, prompt []int32, bodyLen int) decision {
	nodes := r.snapshotNodes()
	cands := make([]candidate, 0, len(nodes))
	for _, s := range nodes {
		if !s.healthy {
			continue
		}
		if lim := s.status.MaxBody; s.hasState && lim > 0 && int64(bodyLen) > lim {
			continue
		}
		cands = append(cands, candidate{snapshot: s})
	}
	d := decision{reason: ReasonNoPrompt}
	if len(cands) == 0 {
		return d
	}
	if len(prompt) > 0 {
		r.matchPrefixes(ctx, prompt, cands)
		d.reason = ReasonLeastLoaded
	}
	for i := range cands {
		c := &cands[i]
		c.load = int(c.n.inflight.Load())
		if c.hasState {
			c.load = max(c.load, c.status.Running+c.status.Waiting)
		}
		over := 0
		if c.hasState && c.status.MaxRunning > 0 {
			over = max(0, c.load-c.status.MaxRunning)
		}
		c.score = float64(c.cached) - r.cfg.LoadWeight*float64(c.load) - r.cfg.QueueWeight*float64(over)
		d.maxCached = max(d.maxCached, c.cached)
	}
	// Rotate before the stable sort so that ties go round-robin.
	k := int(r.rr.Add(1)) % len(cands)
	cands = append(cands[k:], cands[:k]...)
	slices.SortStableFunc(cands, func(a, b candidate) int { return cmp.Compare(b.score, a.score) })
	d.order = cands
	if len(prompt) > 0 && d.maxCached > 0 {
		d.reason = ReasonPrefix
		if cands[0].cached < d.maxCached {
			d.reason = ReasonLoad
		}
	}
	return d
}

// matchPrefixes sets each candidate's cached prefix length: the longer of what the index says
// and what this router recently sent there (blocks the node is computing or has not published
// yet).
func (r *Router) matchPrefixes(ctx context.Context, prompt []int32, cands []candidate) {
	bySize := map[int][]int{} // block size -> candidate indices
	for i, c := range cands {
		bs := r.cfg.BlockSize
		if c.hasState {
			bs = c.status.BlockSize
		}
		bySize[bs] = append(bySize[bs], i)
	}
	for bs, idx := range bySize {
		hashes := prefixhash.Chain(nil, prompt, bs)
		if len(hashes) == 0 {
			continue
		}
		var ids []string
		var withID []int
		for _, i := range idx {
			if cands[i].hasState && cands[i].status.ID != "" {
				ids = append(ids, cands[i].status.ID)
				withID = append(withID, i)
			}
			cands[i].cached = bs * r.recent.match(cands[i].n, hashes)
		}
		if len(ids) == 0 || !r.redisUsable() {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, r.cfg.LookupTimeout)
		start := time.Now()
		blocks, err := r.index.Match(lctx, ids, hashes)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.redisFailed(err)
			}
			continue
		}
		r.m.lookup.Observe(time.Since(start).Seconds())
		for j, i := range withID {
			cands[i].cached = max(cands[i].cached, bs*blocks[j])
		}
	}
}

// affinity remembers which node recently received which prompt blocks, for AffinityTTL: the
// node computes them, then publishes them, and until then the index cannot know. It also keeps
// routing cache-aware while Redis is away.
type affinity struct {
	mu      sync.Mutex
	ttl     time.Duration
	max     int
	entries map[affinityKey]time.Time // expiry
}

type affinityKey struct {
	n    *node
	hash uint64
}

func newAffinity(ttl time.Duration, max int) *affinity {
	return &affinity{ttl: ttl, max: max, entries: map[affinityKey]time.Time{}}
}

// add records that n received a prompt with this block chain (the block size of n's hashes).
func (a *affinity) add(n *node, hashes []uint64) {
	if a.ttl <= 0 {
		return
	}
	exp := time.Now().Add(a.ttl)
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, h := range hashes {
		if len(a.entries) >= a.max {
			a.sweepLocked(time.Now())
			if len(a.entries) >= a.max {
				return
			}
		}
		a.entries[affinityKey{n, h}] = exp
	}
}

// match counts the leading hashes recently sent to n.
func (a *affinity) match(n *node, hashes []uint64) int {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	k := 0
	for _, h := range hashes {
		if exp, ok := a.entries[affinityKey{n, h}]; !ok || now.After(exp) {
			break
		}
		k++
	}
	return k
}

// forget drops everything recorded for n (it failed: its cache is suspect).
func (a *affinity) forget(n *node) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.entries {
		if k.n == n {
			delete(a.entries, k)
		}
	}
}

// sweep drops expired entries.
func (a *affinity) sweep() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweepLocked(time.Now())
}

func (a *affinity) sweepLocked(now time.Time) {
	for k, exp := range a.entries {
		if now.After(exp) {
			delete(a.entries, k)
		}
	}
}
