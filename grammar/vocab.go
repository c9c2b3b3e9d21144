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

	// The trie: node 0 is the root; a node's outgoing edges are edges[edgeLo:edgeHi], sorted by
	// byte, and the tokens whose text ends at it are toks[tokLo:tokHi].
	nodes []trieNode
	edges []trieEdge
	toks  []int32
}

type trieNode struct{ edgeLo, edgeHi, tokLo, tokHi int32 }

type trieEdge struct {
	b     byte
	child int32
}

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
	type bnode struct {
		kids []int32
		b    byte
		toks []int32
	}
	tree := []bnode{{}}
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
			id := int32(len(tree))
			tree = append(tree, bnode{b: b})
			parent := path[len(path)-1]
			tree[parent].kids = append(tree[parent].kids, id)
			path = append(path, id)
		}
		last := path[len(path)-1]
		tree[last].toks = append(tree[last].toks, t)
		prev = p
	}
	v.nodes = make([]trieNode, len(tree))
	for i, n := range tree {
		tn := &v.nodes[i]
		tn.edgeLo = int32(len(v.edges))
		for _, k := range n.kids {
			v.edges = append(v.edges, trieEdge{b: tree[k].b, child: k})
		}
		tn.edgeHi = int32(len(v.edges))
		tn.tokLo = int32(len(v.toks))
		v.toks = append(v.toks, n.toks...)
		tn.tokHi = int32(len(v.toks))
	}
	return v, nil
}

// Size is the number of tokens.
func (v *Vocab) Size() int { return v.n }

func (v *Vocab) isEOG(t int32) bool { return v.eogSet[t>>6]&(1<<(t&63)) != 0 }

func (v *Vocab) piece(t int32) []byte { return v.pieceBuf[v.pieceOff[t]:v.pieceOff[t+1]] }
