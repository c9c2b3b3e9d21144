package recstate

import (
	"testing"

	"ubatch/kvcache"
)

// TestPoolEviction checks the pool's order: take evicts the least recently used unreferenced
// slot, never a referenced one, and fails when every slot is referenced.
func TestPoolEviction(t *testing.T) {
	key := func(i int) kvcache.Key { return kvcache.ChainKey(kvcache.RootKey, []int32{int32(i)}) }
	for _, tc := range []struct {
		name    string
		prep    func(p *pool) // on a pool of 3 slots holding keys 0, 1, 2 taken in that order
		evicted int           // the key a fourth take evicts, -1 when it must fail
	}{
		{name: "oldest", prep: func(p *pool) {}, evicted: 0},
		{name: "touched", prep: func(p *pool) { p.touch(p.find(key(0))) }, evicted: 1},
		{name: "pinned", prep: func(p *pool) { p.pin(p.find(key(0))); p.pin(p.find(key(1))) }, evicted: 2},
		{name: "unpinned goes recent", prep: func(p *pool) { p.pin(p.find(key(0))); p.unpin(p.find(key(0)), false) }, evicted: 1},
		{name: "all pinned", prep: func(p *pool) {
			for i := range 3 {
				p.pin(p.find(key(i)))
			}
		}, evicted: -1},
		{name: "tail dropped", prep: func(p *pool) {
			id := p.find(key(1))
			p.kept[id] = false
			p.pin(id)
			p.unpin(id, true) // freed: the next take uses it without evicting
		}, evicted: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(3)
			for i := range 3 {
				if _, ok := p.take(key(i), int32(i), true); !ok {
					t.Fatal("take failed with free slots")
				}
			}
			tc.prep(&p)
			_, ok := p.take(key(9), 9, true)
			if tc.evicted < 0 {
				if ok {
					t.Fatal("take evicted a referenced slot")
				}
				return
			}
			if !ok || p.find(key(tc.evicted)) >= 0 {
				t.Fatalf("take: ok %v, key %d still held", ok, tc.evicted)
			}
			for i := range 3 {
				if i != tc.evicted && p.find(key(i)) < 0 {
					t.Fatalf("key %d evicted too", i)
				}
			}
		})
	}
}

// TestAdvanceAllocs: a decode step inside a block allocates nothing.
func TestAdvanceAllocs(t *testing.T) {
	m, err := New(Config{MaxSeqs: 1, StateBytes: 1, Budget: 8, Policy: DefaultPolicy})
	if err != nil {
		t.Fatal(err)
	}
	prompt := tokens(1, 20)
	if _, err := m.Start(0, kvcache.Salt{}, prompt, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.Advance(0, prompt); err != nil { // part now has its capacity
		t.Fatal(err)
	}
	tok := []int32{5}
	if n := testing.AllocsPerRun(10, func() { // 20 + 10 stays inside the second block
		if err := m.Advance(0, tok); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Advance of one token allocates %.1f times", n)
	}
}
