package grammar

import (
	"bytes"
	"fmt"
	"slices"
)

// Vocab is a model's vocabulary as a matcher sees it: each token's text as bytes, in a trie, and
// the end-of-generation tokens. Build it once per model; it is immutable and safe for concurrent
// use by any number of Matchers.
type Vocab struct {
	n        int
	pieceOff []int32 // token t's text is pieceBuf[pieceOff[t]:pieceOff[t+1]]
	pieceBuf []byte
	eog      []int32 // sorted
	eogSet   []uint64

	// The trie, flattened in depth-first order so that a mask is one forward scan: node 0 is
	// the root; node i (i > 0) is reached from its parent by byte nb[i], lies at depth ndepth[i],
	// and its subtree is nodes [i, nend[i]). Tokens are listed node by node, so the tokens whose
	// text ends at node i are toks[ntok[i]:ntok[i+1]] and those of its subtree
	// toks[ntok[i]:ntok[nend[i]]].
	nb     []byte
	ndepth []int32
	nend   []int32
	ntok   []int32
	toks   []int32
	// subBytes[nsub[i]] holds every byte on an edge below node i, for nodes with at least
	// minShortcut tokens below them (nsub -1 for the others).
	nsub     []int32
	subBytes []byteSet
	maxDepth int
}

// minShortcut is the subtree size from which a mask tries to take a subtree whole.
const minShortcut = 16

// NewVocab builds a Vocab from every token's text (pieces[t] for token t; empty for control
// tokens, which a grammar never allows) and the end-of-generation tokens, which a grammar allows
// exactly when the output is complete whatever their text.
func NewVocab(pieces [][]byte, eog []int32) (*Vocab, error) {
	v := &Vocab{n: len(pieces), pieceOff: make([]int32, len(pieces)+1), eogSet: make([]uint64, (len(pieces)+63)/64)}
	for _, t := range eog {
		if t < 0 || int(t) >= len(pieces) {
			return nil, fmt.Errorf("grammar: end-of-generation token %d is outside the vocabulary [0, %d)", t, len(pieces))
		}
		v.eogSet[t>>6] |= 1 << (t & 63)
	}
	v.eog = slices.Compact(slices.Sorted(slices.Values(eog)))
	for t, p := range pieces {
		v.pieceBuf = append(v.pieceBuf, p...)
		v.pieceOff[t+1] = int32(len(v.pieceBuf))
	}
	// Insert the tokens in byte order: each one then shares a path with its predecessor up to
	// their common prefix, and every node's children arrive sorted.
	order := make([]int32, 0, len(pieces))
	for t, p := range pieces {
		if len(p) > 0 && !v.isEOG(int32(t)) {
			order = append(order, int32(t))
		}
	}
	slices.SortStableFunc(order, func(a, b int32) int { return bytes.Compare(v.piece(a), v.piece(b)) })
	// Nodes are created in depth-first order: every node is created after its parent and
	// before any node of a later sibling's subtree.
	var parent []int32
	v.nb, v.ndepth, parent = []byte{0}, []int32{0}, []int32{-1}
	nodeToks := [][]int32{nil}
	path := []int32{0} // path[d] is the node at depth d of the previous token
	var prev []byte
	for _, t := range order {
		p := v.piece(t)
		common := 0
		for common < len(p) && common < len(prev) && p[common] == prev[common] {
			common++
		}
		path = path[:common+1]
		for _, b := range p[common:] {
			id := int32(len(v.nb))
			v.nb = append(v.nb, b)
			v.ndepth = append(v.ndepth, int32(len(path)))
			parent = append(parent, path[len(path)-1])
			nodeToks = append(nodeToks, nil)
			path = append(path, id)
		}
		last := path[len(path)-1]
		nodeToks[last] = append(nodeToks[last], t)
		prev = p
		v.maxDepth = max(v.maxDepth, len(p))
	}
	n := len(v.nb)
	v.ntok = make([]int32, n+1)
	for i, ts := range nodeToks {
		v.toks = append(v.toks, ts...)
		v.ntok[i+1] = int32(len(v.toks))
	}
	// One backward pass sees every subtree before its root.
	v.nend, v.nsub = make([]int32, n), make([]int32, n)
	below := make([]byteSet, n)
	for i := n - 1; i >= 0; i-- {
		v.nend[i] = max(v.nend[i], int32(i+1))
		if p := parent[i]; p >= 0 {
			v.nend[p] = max(v.nend[p], v.nend[i])
			below[p].add(v.nb[i], v.nb[i])
			for w := range below[p] {
				below[p][w] |= below[i][w]
			}
		}
		v.nsub[i] = -1
		if v.ntok[v.nend[i]]-v.ntok[i+1] >= minShortcut {
			v.nsub[i] = int32(len(v.subBytes))
			v.subBytes = append(v.subBytes, below[i])
		}
	}
	return v, nil
}

// Size is the number of tokens.
func (v *Vocab) Size() int { return v.n }

func (v *Vocab) isEOG(t int32) bool { return v.eogSet[t>>6]&(1<<(t&63)) != 0 }

func (v *Vocab) piece(t int32) []byte { return v.pieceBuf[v.pieceOff[t]:v.pieceOff[t+1]] }
