package kvcache

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// eventMirror rebuilds the set of hashed blocks from OnBlock events alone, as a consumer that
// publishes the prefix cache elsewhere does.
type eventMirror struct {
	t      *testing.T
	refs   map[uint64]int
	stored int
	remove int
}

func (m *eventMirror) on(c **Cache) func(BlockEvent) {
	return func(ev BlockEvent) {
		switch ev.Kind {
		case BlockStored:
			m.stored++
			if ev.Depth == 0 && ev.Parent != rootHash {
				m.t.Fatalf("first block stored with parent %#x", ev.Parent)
			}
			if ev.Depth > 0 && m.refs[ev.Parent] == 0 {
				m.t.Fatalf("block at depth %d stored while its parent %#x is not hashed", ev.Depth, ev.Parent)
			}
			if len(ev.Tokens) != int((*c).bs) {
				m.t.Fatalf("stored event with %d tokens, block size %d", len(ev.Tokens), (*c).bs)
			}
			if h := (*c).hashFn((*c).seed, ev.Parent, ev.Tokens); h != ev.Hash {
				m.t.Fatalf("stored event: tokens and parent hash to %#x, event says %#x", h, ev.Hash)
			}
			m.refs[ev.Hash]++
		case BlockRemoved:
			m.remove++
			if m.refs[ev.Hash] == 0 {
				m.t.Fatalf("removed event for %#x, which is not hashed", ev.Hash)
			}
			if m.refs[ev.Hash]--; m.refs[ev.Hash] == 0 {
				delete(m.refs, ev.Hash)
			}
		default:
			m.t.Fatalf("event of unknown kind %d", ev.Kind)
		}
	}
}

// check compares the mirror with the cache's hashed blocks.
func (m *eventMirror) check(c *Cache, step int) {
	want := map[uint64]int{}
	for b, h := range c.hashed {
		if h {
			want[c.hash[b]]++
		}
	}
	if len(want) != len(m.refs) {
		m.t.Fatalf("step %d: mirror holds %d hashes, cache %d", step, len(m.refs), len(want))
	}
	for h, n := range want {
		if m.refs[h] != n {
			m.t.Fatalf("step %d: hash %#x held by %d blocks, mirror counts %d", step, h, n, m.refs[h])
		}
	}
}

// TestBlockEventsMirrorTheIndex drives a small cache with random sequence operations (prefix
// attaches, decodes, suffix and middle removals, shifts, frees, evictions, clears) and checks
// after each that the events alone reproduce the set of hashed blocks.
func TestBlockEventsMirrorTheIndex(t *testing.T) {
	tests := []struct {
		name string
		seed uint64
	}{{"seed 1", 1}, {"seed 2", 2}, {"seed 3", 3}, {"seed 4", 4}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(tc.seed, 7))
			m := &eventMirror{t: t, refs: map[uint64]int{}}
			var c *Cache
			c = newCache(t, Config{BlockSize: 4, NumBlocks: 14, MaxSeqs: 4, OnBlock: m.on(&c)})
			docs := make([][]int32, 3)
			for i := range docs {
				docs[i] = make([]int32, 40)
				for j := range docs[i] {
					docs[i][j] = int32(rng.IntN(20))
				}
			}
			doc := make([]int, 4)
			cells := make([]int32, 8)
			for step := range 600 {
				s := rng.IntN(4)
				n := c.SeqCells(s)
				switch x := rng.IntN(100); {
				case x < 50: // decode a few more tokens of the sequence's document
					if n == 0 {
						doc[s] = rng.IntN(len(docs))
						if _, err := c.AttachPrefix(s, docs[doc[s]][:rng.IntN(30)]); err != nil {
							t.Fatal(err)
						}
						n = c.SeqCells(s)
					}
					start := int(c.SeqPosMax(s) + 1)
					k := min(1+rng.IntN(6), len(docs[doc[s]])-start)
					if k <= 0 {
						continue
					}
					toks := docs[doc[s]][start : start+k]
					pos := make([]int32, k)
					seqs := make([][]int32, k)
					for i := range pos {
						pos[i], seqs[i] = int32(start+i), []int32{int32(s)}
					}
					if err := c.Reserve(toks, pos, seqs, cells); err != nil && !isKVFull(err) {
						t.Fatalf("step %d: %v", step, err)
					}
				case x < 62 && n > 0: // drop a suffix or punch a hole
					p0 := int32(rng.IntN(n))
					p1 := int32(-1)
					if rng.IntN(2) == 0 {
						p1 = p0 + 1
					}
					if err := c.SeqRemove(s, p0, p1); err != nil && !isKVFull(err) {
						t.Fatal(err)
					}
				case x < 70 && n > 0:
					if err := c.SeqShift(s, int32(rng.IntN(n)), -1, -1); err != nil && !isKVFull(err) {
						t.Fatal(err)
					}
				case x < 98:
					c.SeqFree(s)
				default:
					c.Clear()
				}
				m.check(c, step)
			}
			if m.stored == 0 || m.remove == 0 {
				t.Fatalf("the run stored %d and removed %d blocks: it exercised nothing", m.stored, m.remove)
			}
			t.Logf("%d stored, %d removed events", m.stored, m.remove)
		})
	}
}

func isKVFull(err error) bool { return errors.Is(err, ErrKVFull) }
