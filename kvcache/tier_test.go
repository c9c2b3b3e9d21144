package kvcache

import (
	"slices"
	"testing"

	"ubatch/batch"
	"ubatch/quant"
)

// TestSpillSeq swaps a sequence out: every full block and its partly filled last block are
// read out (KVSave) with their chained keys, and the images hold the cells' K/V.
func TestSpillSeq(t *testing.T) {
	c := newCache(t, Config{NLayers: 2, KVDim: 2, BlockSize: 4, NumBlocks: 8, MaxSeqs: 2, DType: quant.F32})
	c.enableTier(func() bool { return false })
	toks := []int32{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}
	reserve(t, c, []int32{0}, 0, 1, toks...)
	c.sync()
	blocks, cells := c.SpillSeq(0)
	if blocks != 3 || cells != 10 {
		t.Fatalf("SpillSeq = %d blocks, %d cells; want 3 and 10", blocks, cells)
	}
	ops := c.TakeOps(nil)
	spills := c.TakeSpills(nil)
	keys := ChainKeys(nil, toks, 4)
	if len(spills) != 3 || spills[0].Key != keys[0] || spills[1].Parent != keys[0] || spills[1].Key != keys[1] ||
		spills[2].Key != ChainKey(keys[1], toks[8:]) || !slices.Equal(spills[2].Tokens, toks[8:]) || !spills[2].Swap {
		t.Fatalf("spills %+v", spills)
	}
	for i, o := range ops {
		if o.Kind != batch.KVSave || o.Dst != spills[i].Img || int(o.N) != len(spills[i].Tokens) {
			t.Fatalf("op %d %+v for spill %+v", i, o, spills[i])
		}
	}
	// A tier that holds them already wants none again.
	c.SetSpill(func(Key) bool { return false })
	if b, _ := c.SpillSeq(0); b != 0 {
		t.Fatalf("SpillSeq with a tier that refuses = %d blocks", b)
	}
}
