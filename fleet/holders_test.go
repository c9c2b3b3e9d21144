package fleet

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"ubatch/internal/testkit"
	"ubatch/internal/testredis"
	"ubatch/prefixhash"
)

func TestHoldersFindsPeersOfTheSameIdentity(t *testing.T) {
	rs := testredis.Start(t)
	c := rs.Client()
	ctx := context.Background()
	prompt := tokens(5*bs+2, 40) // five full blocks
	chain := prefixhash.Chain(nil, prompt, bs)
	publish := func(st Status, blocks int) {
		t.Helper()
		b, _ := json.Marshal(st)
		c.SAdd(ctx, "test:nodes", st.ID)
		c.Set(ctx, "test:node:"+st.ID, b, 0)
		for _, h := range chain[:blocks] {
			c.SAdd(ctx, "test:node:"+st.ID+":blocks", hashMember(h))
		}
	}
	node := func(id, ident string, block, running int) Status {
		return Status{ID: id, URL: "http://" + id, BlockSize: block, KVIdentity: ident, Load: Load{Running: running}}
	}
	publish(node("self", "m1", bs, 0), 5)
	publish(node("a", "m1", bs, 3), 4)
	publish(node("b", "m1", bs, 1), 4)   // as long as a, less loaded: first
	publish(node("c", "m1", bs, 0), 2)   // shorter
	publish(node("d", "m2", bs, 0), 5)   // another model
	publish(node("e", "m1", 2*bs, 0), 5) // another block size: its hashes are not these
	publish(node("f", "", bs, 0), 5)     // does not serve its blocks
	publish(node("g", "m1", bs, 0), 0)   // holds nothing

	ix := NewIndex(c, "test")
	nodes, bad, err := ix.Nodes(ctx)
	if err != nil || bad != 0 {
		t.Fatalf("Nodes: %v, %d bad", err, bad)
	}
	tests := []struct {
		name  string
		q     HolderQuery
		min   int
		want  []string
		match []int
	}{
		{"best first", HolderQuery{Self: "self", KVIdentity: "m1", BlockSize: bs}, 1, []string{"b", "a", "c"}, []int{4, 4, 2}},
		{"at least three blocks", HolderQuery{Self: "self", KVIdentity: "m1", BlockSize: bs}, 3, []string{"b", "a"}, []int{4, 4}},
		{"more than any peer holds", HolderQuery{Self: "self", KVIdentity: "m1", BlockSize: bs}, 5, nil, nil},
		{"another identity", HolderQuery{Self: "self", KVIdentity: "m2", BlockSize: bs}, 1, []string{"d"}, []int{5}},
		{"no identity: no peers", HolderQuery{Self: "self", BlockSize: bs}, 1, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs, err := ix.Holders(ctx, nodes, tc.q, chain, tc.min)
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) != len(tc.want) {
				t.Fatalf("holders %+v, want %v", hs, tc.want)
			}
			for i, h := range hs {
				if h.ID != tc.want[i] || h.Match != tc.match[i] || h.URL != "http://"+h.ID {
					t.Fatalf("holder %d: %s with %d blocks at %s, want %s with %d", i, h.ID, h.Match, h.URL, tc.want[i], tc.match[i])
				}
			}
		})
	}
}

func TestPublisherPublishesTheKVIdentity(t *testing.T) {
	rs := testredis.Start(t)
	f := newFixture(t, rs, 8)
	f.pub.cfg.KVIdentity = "model-abc"
	f.run()
	a := tokens(8, 1)
	f.node.prefill(0, a)
	testkit.Eventually(t, 5*time.Second, "the identity and the blocks", func() bool {
		nodes, _, err := f.index.Nodes(context.Background())
		if err != nil || len(nodes) != 1 {
			return false
		}
		hs, err := f.index.Holders(context.Background(), nodes, HolderQuery{Self: "other", KVIdentity: "model-abc", BlockSize: bs},
			prefixhash.Chain(nil, a, bs), 1)
		return err == nil && len(hs) == 1 && hs[0].Match == 2
	})
}
