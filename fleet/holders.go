package fleet

import (
	"cmp"
	"context"
	"slices"
)

// Holder is a peer that holds the leading blocks of a prompt.
type Holder struct {
	Status
	Match int // leading hashes of the chain the peer holds, in blocks
}

// HolderQuery says whose blocks a node may import: peers other than Self, of the same
// KVIdentity and BlockSize (a block's K/V is only valid in a cache of the same model, type and
// layout, and routing hashes of another block size never match).
type HolderQuery struct {
	Self       string // the asking node's id, never a holder of its own blocks
	KVIdentity string // must be non-empty
	BlockSize  int
}

// Holders returns the peers matching q that hold at least min leading hashes of the prompt's
// chain hashes (prefixhash.Chain for q.BlockSize), best first: the longest match, then the
// least loaded (running plus waiting), then id. nodes is the fleet as Nodes returned it (the
// caller may cache that list for a while; a dead node among them matches nothing, its block
// set having expired with its status). One pipelined round trip.
func (ix *Index) Holders(ctx context.Context, nodes []Status, q HolderQuery, hashes []uint64, min int) ([]Holder, error) {
	if q.KVIdentity == "" || len(hashes) == 0 {
		return nil, nil
	}
	var cand []Status
	var ids []string
	for _, st := range nodes {
		if st.ID == q.Self || st.KVIdentity != q.KVIdentity || st.BlockSize != q.BlockSize {
			continue
		}
		cand = append(cand, st)
		ids = append(ids, st.ID)
	}
	if len(cand) == 0 {
		return nil, nil
	}
	m, err := ix.Match(ctx, ids, hashes)
	if err != nil {
		return nil, err
	}
	var out []Holder
	for i, st := range cand {
		if m[i] >= max(min, 1) {
			out = append(out, Holder{Status: st, Match: m[i]})
		}
	}
	slices.SortFunc(out, func(a, b Holder) int {
		if a.Match != b.Match {
			return cmp.Compare(b.Match, a.Match)
		}
		if la, lb := a.Running+a.Waiting, b.Running+b.Waiting; la != lb {
			return cmp.Compare(la, lb)
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}
