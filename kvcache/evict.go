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

// evictOrder is the order in which cached blocks are evicted: a min-heap of block ids by
// priority (above), the earliest cached first on a tie. Its per-block slices are indexed by
// block id; a block is in it exactly when it is cached.
type evictOrder struct {
	heap  []int32   // the cached blocks, heap-ordered
	idx   []int32   // per block: its position in heap, -1 when not cached
	prio  []float64 // per block: its priority, set when it was cached
	at    []uint64  // per block: stamp when it was cached
	clock float64   // the priority of the last evicted block
	stamp uint64
}

func newEvictOrder(nBlocks int) evictOrder {
	q := evictOrder{heap: make([]int32, 0, nBlocks), idx: make([]int32, nBlocks),
		prio: make([]float64, nBlocks), at: make([]uint64, nBlocks)}
	q.clear()
	return q
}

// clear empties the order and sets the clock back to 0.
func (q *evictOrder) clear() {
	q.heap, q.clock = q.heap[:0], 0
	for b := range q.idx {
		q.idx[b] = -1
	}
}

// len is the number of cached blocks.
func (q *evictOrder) len() int { return len(q.heap) }

// has reports whether b is cached.
func (q *evictOrder) has(b int32) bool { return q.idx[b] >= 0 }

// blocks returns the cached blocks in heap order (the first the next to go); read-only, valid
// until the order changes.
func (q *evictOrder) blocks() []int32 { return q.heap }

// push makes b, not cached, cached, priced as of now for hits uses at depth.
func (q *evictOrder) push(b, hits, depth int32) {
	q.prio[b] = q.clock + float64(min(hits, maxHits))*blockCost(depth)
	q.stamp++
	q.at[b] = q.stamp
	i := int32(len(q.heap))
	q.heap = append(q.heap, b)
	q.idx[b] = i
	q.up(i)
}

// remove takes the cached block b out (it is being attached, evicted or forgotten).
func (q *evictOrder) remove(b int32) {
	i := q.idx[b]
	last := int32(len(q.heap) - 1)
	if i != last {
		q.swap(i, last)
	}
	q.heap = q.heap[:last]
	q.idx[b] = -1
	if i != last {
		q.down(i)
		q.up(i)
	}
}

// pop removes the cached block of lowest priority, advances the clock to its priority and
// returns it; there must be one.
func (q *evictOrder) pop() int32 {
	b := q.heap[0]
	q.remove(b)
	q.clock = max(q.clock, q.prio[b])
	return b
}

func (q *evictOrder) less(i, j int32) bool {
	a, b := q.heap[i], q.heap[j]
	if q.prio[a] != q.prio[b] {
		return q.prio[a] < q.prio[b]
	}
	return q.at[a] < q.at[b]
}

func (q *evictOrder) swap(i, j int32) {
	q.heap[i], q.heap[j] = q.heap[j], q.heap[i]
	q.idx[q.heap[i]], q.idx[q.heap[j]] = i, j
}

func (q *evictOrder) up(i int32) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			return
		}
		q.swap(i, p)
		i = p
	}
}

func (q *evictOrder) down(i int32) {
	n := int32(len(q.heap))
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			return
		}
		q.swap(i, m)
		i = m
	}
}

// cachePush makes the unreferenced block b cached, priced as of now.
func (s *blockState) cachePush(b int32) { s.evq.push(b, s.hits[b], s.depth[b]) }

// cacheRemove takes the cached block b out of the eviction order (it is being attached,
// evicted or forgotten).
func (s *blockState) cacheRemove(b int32) { s.evq.remove(b) }

// evict removes the cached block of lowest priority and returns it; there must be one.
func (s *blockState) evict() int32 { return s.evq.pop() }
