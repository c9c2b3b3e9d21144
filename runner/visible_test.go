package runner

import (
	"slices"
	"testing"

	"ubatch/batch"
	"ubatch/ops"
)

// probe is a Graph without weights whose Forward records, for each window, the positions of
// the cells every token of the micro-batch attends to.
type probe struct {
	h       Hparams
	rope    *ops.Rope
	windows []int32
	seen    map[int32][][]int32 // window -> per token, the positions it sees (all micro-batches)
}

func (p *probe) Hparams() *Hparams       { return &p.h }
func (p *probe) Matrices() []*Weight     { return nil }
func (p *probe) LayerRope(int) *ops.Rope { return p.rope }
func (p *probe) Forward(c *Runtime, ub *batch.UBatch) {
	for _, w := range p.windows {
		l := c.visible(w, false)
		for t := range ub.Tokens {
			var pos []int32
			for _, cell := range l.cells[l.off[t]:l.off[t+1]] {
				pos = append(pos, c.kv.CellPos[cell])
			}
			slices.Sort(pos)
			p.seen[w] = append(p.seen[w], pos)
		}
	}
}

func span(lo, hi int32) []int32 {
	var out []int32
	for p := lo; p < hi; p++ {
		out = append(out, p)
	}
	return out
}

// TestVisibleCells: a token sees its own sequence's cells at positions <= its own, and with a
// window w only those in (pos-w, pos]; a token in another sequence sees nothing of this one.
func TestVisibleCells(t *testing.T) {
	rope, err := ops.NewRope(ops.RopeConfig{Dims: 2, Base: 10000})
	if err != nil {
		t.Fatal(err)
	}
	g := &probe{h: Hparams{Dim: 2, NLayers: 1, NHeads: 1, NKVHeads: 1, HeadDim: 2, FFN: 2, Vocab: 8, CtxTrain: 64},
		rope: rope, windows: []int32{0, 4}, seen: map[int32][][]int32{}}
	c, err := New(g, Options{NCtx: 64, NSeqMax: 2, NUBatch: 8, BlockSize: 4, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b batch.Batch
	for p := range int32(10) { // sequence 0: ten tokens, split into micro-batches of 8
		b.Add(1, p, []int32{0}, false)
	}
	b.Add(2, 0, []int32{1}, false) // sequence 1: one token
	s, err := NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Decode(&b); err != nil {
		t.Fatal(err)
	}
	for p := range int32(10) {
		if got, want := g.seen[0][p], span(0, p+1); !slices.Equal(got, want) {
			t.Errorf("full history, token at %d sees %v, want %v", p, got, want)
		}
		if got, want := g.seen[4][p], span(max(0, p-3), p+1); !slices.Equal(got, want) {
			t.Errorf("window 4, token at %d sees %v, want %v", p, got, want)
		}
	}
	if got := g.seen[0][10]; !slices.Equal(got, []int32{0}) {
		t.Errorf("sequence 1's token sees %v, want only its own cell", got)
	}
}
