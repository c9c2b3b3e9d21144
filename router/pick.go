package router

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"ubatch/prefixhash"
)

// candidate is a node scored for one request.
type candidate struct {
	snapshot
	cached int // prompt tokens the node holds (index or recent affinity)
	fetch  int // more prompt tokens a peer of the same KV identity holds (Config.PeerCredit)
	load   int
	score  float64
}

// decision is the ordered list of nodes to try for a request, and why the first was chosen.
type decision struct {
	order     []candidate
	reason    string
	maxCached int
}

// String lists the candidates in order as node:cached/load=score, for debug logs.
func (d decision) String() string {
	var b strings.Builder
	for i, c := range d.order {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%d/%d=%.0f", c.n.label, c.cached, c.load, c.score)
	}
	return b.String()
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
//
// With PeerCredit, a node that publishes a KV identity (it fetches from peers) also gets
// PeerCredit tokens per prompt token that another candidate of its identity holds beyond its
// own: the fetch costs a fraction of the compute, so the prefix pins the tenant less and a busy
// node's tenant spreads to the least loaded of its peers, which fetches the prefix.
func (r *Router) decide(ctx context.Context, prompt []int32, bodyLen int) decision {
	return r.decideFrom(ctx, prompt, prefixhash.Root, bodyLen)
}

// decideFrom is decide for a prompt whose routing hashes chain from root (its cache_salt's,
// prefixhash.Salted): nodes hold a salted prompt's blocks under those hashes only.
func (r *Router) decideFrom(ctx context.Context, prompt []int32, root uint64, bodyLen int) decision {
	return r.decideAmong(ctx, prompt, root, bodyLen, nil)
}

// decideAmong is decideFrom over the nodes whose label (host:port) allow holds; nil allows all.
func (r *Router) decideAmong(ctx context.Context, prompt []int32, root uint64, bodyLen int, allow map[string]bool) decision {
	nodes := r.snapshotNodes()
	cands := make([]candidate, 0, len(nodes))
	for _, s := range nodes {
		if !s.healthy || (allow != nil && !allow[s.n.label]) {
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
	var chains map[int][]uint64 // block size -> the prompt's chained block hashes
	if len(prompt) > 0 {
		chains = r.matchIndex(ctx, prompt, root, cands)
		d.reason = ReasonLeastLoaded
	}
	// Affinity and in-flight counts are read and the choice claimed under one lock: requests
	// arriving together (a burst with one system prompt) then see each other's choices instead
	// of all picking the node that looked least loaded, each computing the prompt once more.
	r.pickMu.Lock()
	defer r.pickMu.Unlock()
	for i := range cands {
		c := &cands[i]
		if h := chains[c.blockSize(r.cfg.BlockSize)]; len(h) > 0 {
			c.cached = max(c.cached, c.blockSize(r.cfg.BlockSize)*r.recent.match(c.n, h))
		}
		c.load = int(c.n.inflight.Load())
		if c.hasState {
			c.load = max(c.load, c.status.Running+c.status.Waiting)
		}
		over := 0
		if c.hasState {
			if bound := c.status.RunBound(); bound > 0 {
				over = max(0, c.load-bound)
			}
		}
		c.score = float64(c.cached) - r.cfg.LoadWeight*float64(c.load) - r.cfg.QueueWeight*float64(over)
		d.maxCached = max(d.maxCached, c.cached)
	}
	if r.cfg.PeerCredit > 0 && d.maxCached > 0 {
		creditPeers(cands, r.cfg.PeerCredit)
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
			if cands[0].fetch > 0 {
				d.reason = ReasonPeer
			}
		}
	}
	r.claim(cands[0].n, chains[cands[0].blockSize(r.cfg.BlockSize)])
	return d
}

// creditPeers adds to each candidate's score credit times the prompt tokens that a candidate of
// its KV identity (and so of its model and block size) holds beyond its own.
func creditPeers(cands []candidate, credit float64) {
	best := map[string]int{}
	for _, c := range cands {
		if id := c.kvIdentity(); id != "" {
			best[id] = max(best[id], c.cached)
		}
	}
	for i := range cands {
		c := &cands[i]
		if id := c.kvIdentity(); id != "" && best[id] > c.cached {
			c.fetch = best[id] - c.cached
			c.score += credit * float64(c.fetch)
		}
	}
}

// kvIdentity is the node's published KV identity, "" when it fetches no blocks from peers (or
// its status is stale).
func (c *candidate) kvIdentity() string {
	if !c.hasState {
		return ""
	}
	return c.status.KVIdentity
}

// claim counts a request in flight at n, and records that n receives the prompt's blocks
// (hashes, n's block size; nil for a request without a prompt). release undoes the count.
func (r *Router) claim(n *node, hashes []uint64) {
	n.inflight.Add(1)
	r.m.inflight.WithLabelValues(n.label).Inc()
	r.recent.add(n, hashes)
}

func (r *Router) release(n *node) {
	n.inflight.Add(-1)
	r.m.inflight.WithLabelValues(n.label).Dec()
}

// blockSize is the node's KV block size, def until its status is known.
func (c *candidate) blockSize(def int) int {
	if c.hasState {
		return c.status.BlockSize
	}
	return def
}

// matchIndex sets each candidate's cached prefix length from what the index in Redis says its
// node holds, and returns the prompt's block hashes for each block size among the candidates.
func (r *Router) matchIndex(ctx context.Context, prompt []int32, root uint64, cands []candidate) map[int][]uint64 {
	chains := map[int][]uint64{}
	bySize := map[int][]int{} // block size -> candidate indices
	for i := range cands {
		bs := cands[i].blockSize(r.cfg.BlockSize)
		bySize[bs] = append(bySize[bs], i)
	}
	for bs, idx := range bySize {
		hashes := prefixhash.ChainFrom(nil, root, prompt, bs)
		if len(hashes) == 0 {
			continue
		}
		chains[bs] = hashes
		var ids []string
		var withID []int
		for _, i := range idx {
			if cands[i].hasState && cands[i].status.ID != "" {
				ids = append(ids, cands[i].status.ID)
				withID = append(withID, i)
			}
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
			cands[i].cached = bs * blocks[j]
		}
	}
	return chains
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

// prefixKey identifies the group of prompts that open the same way: the chained hash of the
// prompt's first keyTokens tokens (its full blocks of 16 when shorter), or 0 for a prompt under
// one block. Tenants' system prompts, a chat's history, a few-shot header share it.
func prefixKey(prompt []int32) uint64 {
	const bs, keyTokens = 16, 128
	h := prefixhash.Chain(nil, prompt[:min(len(prompt), keyTokens)], bs)
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1]
}
