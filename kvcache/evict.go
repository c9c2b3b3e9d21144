package kvcache

// Eviction of cached blocks (refcount 0, kept for prefix reuse) weighs how often a block was
// used, how recently, and what losing it costs, in the manner of GreedyDual-Size-Frequency:
// when a block becomes cached it gets the priority
//
//	clock + min(hits, maxHits) × cost(depth),  cost(d) = 1 + 1/(1+d)
//
// and the block of lowest priority is evicted first (the earliest cached on a tie), after which
// clock rises to that block's priority. hits counts the sequences that used the block: the one
// that computed it and every one that attached it or copied from it. Recency comes from the
// clock: a block cached long ago was priced against a lower clock, so blocks that once had many
// hits age out after that many turnovers of the cache unless they are used again. cost prices
// the miss: losing a block costs its own recompute (1) and, because a prefix match stops at the
// first missing block, a share for the blocks chained below it that can no longer be reached,
// largest at the root; so the deepest blocks of a hot prefix go first and its root last, and a
// system prompt that every request attaches outlives any number of one-off prompts that pass
// through a cache too small to hold them all. maxHits bounds how long a prefix that is no
// longer used lingers.
const maxHits = 16

func blockCost(depth int32) float64 { return 1 + 1/float64(1+depth) }

// cachePush makes the unreferenced block b cached, priced as of now.
func (c *Manager) cachePush(b int32) {
	c.prio[b] = c.clock + float64(min(c.hits[b], maxHits))*blockCost(c.depth[b])
	c.stamp++
	c.cachedAt[b] = c.stamp
	i := int32(len(c.heap))
	c.heap = append(c.heap, b)
	c.heapIdx[b] = i
	c.up(i)
}

// cacheRemove takes the cached block b out of the eviction heap (it is being attached,
// evicted or forgotten).
func (c *Manager) cacheRemove(b int32) {
	i := c.heapIdx[b]
	last := int32(len(c.heap) - 1)
	if i != last {
		c.swap(i, last)
	}
	c.heap = c.heap[:last]
	c.heapIdx[b] = -1
	if i != last {
		c.down(i)
		c.up(i)
	}
}

// evict removes the cached block of lowest priority, advances the clock to its priority and
// returns it; there must be one.
func (c *Manager) evict() int32 {
	b := c.heap[0]
	c.cacheRemove(b)
	c.clock = max(c.clock, c.prio[b])
	return b
}

func (c *Manager) less(i, j int32) bool {
	a, b := c.heap[i], c.heap[j]
	if c.prio[a] != c.prio[b] {
		return c.prio[a] < c.prio[b]
	}
	return c.cachedAt[a] < c.cachedAt[b]
}

func (c *Manager) swap(i, j int32) {
	c.heap[i], c.heap[j] = c.heap[j], c.heap[i]
	c.heapIdx[c.heap[i]], c.heapIdx[c.heap[j]] = i, j
}

func (c *Manager) up(i int32) {
	for i > 0 {
		p := (i - 1) / 2
		if !c.less(i, p) {
			return
		}
		c.swap(i, p)
		i = p
	}
}

func (c *Manager) down(i int32) {
	n := int32(len(c.heap))
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && c.less(r, l) {
			m = r
		}
		if !c.less(m, i) {
			return
		}
		c.swap(i, m)
		i = m
	}
}
