package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"sort"

	"github.com/redis/go-redis/v9"
)

// Index reads what the nodes publish; routers use it. It is safe for concurrent use.
type Index struct {
	rdb  *redis.Client
	keys keys
}

// NewIndex reads the fleet in namespace ns ("" = DefaultNamespace) from rdb.
func NewIndex(rdb *redis.Client, ns string) *Index { return &Index{rdb: rdb, keys: newKeys(ns)} }

// Nodes returns the status of every live node (its status key still exists), sorted by id.
// Entries that do not parse, or whose id does not match their key, are skipped and counted in
// bad.
func (ix *Index) Nodes(ctx context.Context) (nodes []Status, bad int, err error) {
	ids, err := ix.rdb.SMembers(ctx, ix.keys.nodes()).Result()
	if err != nil || len(ids) == 0 {
		return nil, 0, err
	}
	sort.Strings(ids)
	ks := make([]string, len(ids))
	for i, id := range ids {
		ks[i] = ix.keys.status(id)
	}
	vals, err := ix.rdb.MGet(ctx, ks...).Result()
	if err != nil {
		return nil, 0, err
	}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok { // nil: the node's status expired (dead node)
			continue
		}
		var st Status
		if json.Unmarshal([]byte(s), &st) != nil || st.ID != ids[i] || st.URL == "" || st.BlockSize <= 0 {
			bad++
			continue
		}
		nodes = append(nodes, st)
	}
	return nodes, bad, nil
}

// Match returns, for each node id, how many leading hashes of a prompt's block chain the node
// holds: the longest cached prefix, in blocks. hashes must be the chain for the node's block
// size (prefixhash.Chain). One pipelined round trip.
func (ix *Index) Match(ctx context.Context, ids []string, hashes []uint64) ([]int, error) {
	out := make([]int, len(ids))
	if len(ids) == 0 || len(hashes) == 0 {
		return out, nil
	}
	ms := make([]any, len(hashes))
	for i, h := range hashes {
		ms[i] = hashMember(h)
	}
	pipe := ix.rdb.Pipeline()
	cmds := make([]*redis.BoolSliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.SMIsMember(ctx, ix.keys.blocks(id), ms...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for i, c := range cmds {
		for _, in := range c.Val() {
			if !in {
				break
			}
			out[i]++
		}
	}
	return out, nil
}

// Members returns the routing hashes a node publishes (for tests and debugging).
func (ix *Index) Members(ctx context.Context, id string) (map[uint64]bool, error) {
	ss, err := ix.rdb.SMembers(ctx, ix.keys.blocks(id)).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]bool, len(ss))
	for _, s := range ss {
		if h, err := parseMember(s); err == nil {
			out[h] = true
		}
	}
	return out, nil
}
