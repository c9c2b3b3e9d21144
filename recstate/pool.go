package recstate

import "ubatch/kvcache"

// pool is the bookkeeping of the snapshot slots: which Key each live slot holds, at which
// position, its reference count, and the least-recently-used order of the unreferenced ones.
// Slots are indexed [0, len(key)); the state's owner keeps one StateBytes buffer per slot. The
// reference counts are written only here (pin, unpin), so a referenced slot is never in the LRU
// list and take never evicts it.
type pool struct {
	key   []kvcache.Key
	pos   []int32 // the boundary (tokens consumed) the slot's state is valid at
	ref   []int32 // sequences anchored on the slot
	kept  []bool  // a policy boundary's snapshot, not a tail that is dropped once superseded
	hits  []int8  // uses since it was taken, at most maxHits: second chances before eviction
	live  []bool  // the slot holds a snapshot (in byKey)
	prev  []int32 // LRU links of unreferenced live slots, -1 at the ends
	next  []int32
	head  int32 // least recently used unreferenced slot, -1 when none
	tail  int32 // most recently used
	byKey map[kvcache.Key]int32
	free  []int32

	evictions, drops int64
}

func newPool(n int) pool {
	p := pool{key: make([]kvcache.Key, n), pos: make([]int32, n), ref: make([]int32, n),
		kept: make([]bool, n), hits: make([]int8, n), live: make([]bool, n), prev: make([]int32, n),
		next: make([]int32, n), head: -1, tail: -1, byKey: make(map[kvcache.Key]int32, n),
		free: make([]int32, 0, n)}
	for i := n - 1; i >= 0; i-- {
		p.free = append(p.free, int32(i))
	}
	return p
}

// find returns the slot holding the snapshot named k, -1 when none.
func (p *pool) find(k kvcache.Key) int32 {
	if id, ok := p.byKey[k]; ok {
		return id
	}
	return -1
}

// take returns a slot for a new snapshot named k at position pos: a free one, else the least
// recently used unreferenced one, evicted. The slot is unreferenced, at the LRU list's recent
// end. ok is false when every slot is referenced (or there are none).
func (p *pool) take(k kvcache.Key, pos int32, kept bool) (int32, bool) {
	var id int32
	if n := len(p.free); n > 0 {
		id = p.free[n-1]
		p.free = p.free[:n-1]
	} else if p.head >= 0 {
		// Second chances (CLOCK): a used snapshot, a shared prefix's, goes back to the recent
		// end once per use, so a stream of one-off prompts' snapshots passes it by. Bounded:
		// each pass spends a use, at most maxHits per slot.
		for p.hits[p.head] > 0 {
			id = p.head
			p.hits[id]--
			p.unlink(id)
			p.pushRecent(id)
		}
		id = p.head
		p.unlink(id)
		delete(p.byKey, p.key[id])
		p.evictions++
	} else {
		return -1, false
	}
	p.key[id], p.pos[id], p.kept[id], p.live[id], p.ref[id], p.hits[id] = k, pos, kept, true, 0, 0
	p.byKey[k] = id
	p.pushRecent(id)
	return id, true
}

// maxHits bounds a snapshot's second chances.
const maxHits = 3

// use marks slot id as used by another sequence than the one that saved it (a prefix hit, a
// cut back, a save of the same prefix): it is just used, and gains a second chance.
func (p *pool) use(id int32) {
	p.hits[id] = min(p.hits[id]+1, maxHits)
	p.touch(id)
}

// touch marks the unreferenced slot id as just used.
func (p *pool) touch(id int32) {
	if p.ref[id] == 0 {
		p.unlink(id)
		p.pushRecent(id)
	}
}

// pin adds a reference to the live slot id, taking it out of the LRU list.
func (p *pool) pin(id int32) {
	if p.ref[id] == 0 {
		p.unlink(id)
	}
	p.ref[id]++
}

// unpin drops a reference to id; an unreferenced slot goes to the LRU list's recent end, or is
// freed at once when it is a tail snapshot (not kept) and drop is set.
func (p *pool) unpin(id int32, drop bool) {
	p.ref[id]--
	if p.ref[id] > 0 {
		return
	}
	if drop && !p.kept[id] {
		delete(p.byKey, p.key[id])
		p.live[id] = false
		p.free = append(p.free, id)
		p.drops++
		return
	}
	p.pushRecent(id)
}

func (p *pool) pushRecent(id int32) {
	p.prev[id], p.next[id] = p.tail, -1
	if p.tail >= 0 {
		p.next[p.tail] = id
	} else {
		p.head = id
	}
	p.tail = id
}

func (p *pool) unlink(id int32) {
	if p.prev[id] >= 0 {
		p.next[p.prev[id]] = p.next[id]
	} else {
		p.head = p.next[id]
	}
	if p.next[id] >= 0 {
		p.prev[p.next[id]] = p.prev[id]
	} else {
		p.tail = p.prev[id]
	}
	p.prev[id], p.next[id] = -1, -1
}

// counts returns the live slots and the referenced ones.
func (p *pool) counts() (live, referenced int) {
	for id, l := range p.live {
		if l {
			live++
			if p.ref[id] > 0 {
				referenced++
			}
		}
	}
	return live, referenced
}
