package kvcache

// children lists, per parent hash, the blocks chained from it (hashed, duplicates included,
// or kept partial), newest first, for partial matches: a doubly linked list through per-block
// links, indexed by block id. A block is on at most one list, its parent's.
type children struct {
	head       map[uint64]int32 // parent hash -> the newest block chained from it
	next, prev []int32          // per block: its neighbours on its list, -1 at the ends or off any
}

func newChildren(nBlocks int) children {
	ch := children{head: make(map[uint64]int32, nBlocks), next: make([]int32, nBlocks), prev: make([]int32, nBlocks)}
	ch.clear()
	return ch
}

// clear empties every list.
func (ch *children) clear() {
	clear(ch.head)
	for b := range ch.next {
		ch.next[b], ch.prev[b] = -1, -1
	}
}

// first is the newest block chained from parent, -1 if none; after is the one after b on its
// list, -1 at its end.
func (ch *children) first(parent uint64) int32 {
	if b, ok := ch.head[parent]; ok {
		return b
	}
	return -1
}

func (ch *children) after(b int32) int32 { return ch.next[b] }

// link puts b, on no list, at the head of parent's.
func (ch *children) link(b int32, parent uint64) {
	head := ch.first(parent)
	ch.prev[b], ch.next[b] = -1, head
	if head >= 0 {
		ch.prev[head] = b
	}
	ch.head[parent] = b
}

// unlink takes b off parent's list, which it is on.
func (ch *children) unlink(b int32, parent uint64) {
	p, n := ch.prev[b], ch.next[b]
	switch {
	case p >= 0:
		ch.next[p] = n
	case n >= 0:
		ch.head[parent] = n
	default:
		delete(ch.head, parent)
	}
	if n >= 0 {
		ch.prev[n] = p
	}
	ch.prev[b], ch.next[b] = -1, -1
}
