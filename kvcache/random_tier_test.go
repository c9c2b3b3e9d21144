package kvcache

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"ubatch/batch"
	"ubatch/quant"
)

func f32View(x []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x)) }
func u16View(x []uint16) []byte  { return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 2*len(x)) }

// testTier stands in for the disk tier: the blocks the manager spilled (TakeSpills), with the
// bytes its KVSave operations read out of the test store, by Key; Import's KVLoad images come
// from it. refuse makes it turn blocks down at random (a writer that is behind).
type testTier struct {
	blocks  map[Key]tierBlock
	loads   [][]byte // images of the pending KVLoad operations, by index
	refuse  func() bool
	spilled int
}

type tierBlock struct {
	parent Key
	depth  int32
	toks   []int32
	data   []byte
}

func (c *Cache) enableTier(refuse func() bool) {
	c.tier = &testTier{blocks: map[Key]tierBlock{}, refuse: refuse}
	c.SetSpill(func(k Key) bool {
		_, ok := c.tier.blocks[k]
		return !ok && !c.tier.refuse()
	})
}

// imageBytes is the size of an image of n cells of the test store.
func (s *testStore) imageBytes(n int32) int { return 2 * s.cfg.NLayers * int(n) * s.rowBytes }

// sync applies c.ops with the images of the pending loads and of the spills, then keeps the
// spilled blocks.
func (t *testTier) sync(c *Cache) {
	spills := c.TakeSpills(nil)
	imgs := slices.Clone(t.loads)
	for _, sp := range spills {
		for int(sp.Img) >= len(imgs) {
			imgs = append(imgs, nil)
		}
		imgs[sp.Img] = make([]byte, c.st.imageBytes(int32(len(sp.Tokens))))
	}
	c.st.apply(c.ops, imgs)
	t.loads = t.loads[:0]
	for _, sp := range spills {
		t.blocks[sp.Key] = tierBlock{parent: sp.Parent, depth: sp.Depth, toks: slices.Clone(sp.Tokens), data: imgs[sp.Img]}
		t.spilled++
	}
}

// image does a KVLoad or KVSave of the test store: [layer][K, V][cell][row bytes], the floats
// little-endian as kvstore's images.
func (s *testStore) image(o batch.KVOp, images [][]byte) {
	cell, idx := o.Dst, o.Src
	if o.Kind == batch.KVSave {
		cell, idx = o.Src, o.Dst
	}
	img := images[idx]
	if len(img) != s.imageBytes(o.N) {
		panic(fmt.Sprintf("image %d of %d bytes for %d cells", idx, len(img), o.N))
	}
	span := int(o.N) * s.rowBytes
	for l := range s.cfg.NLayers {
		for kv := range 2 {
			part := img[(2*l+kv)*span : (2*l+kv+1)*span]
			store := s.layerBytes(l, kv)[int(cell)*s.rowBytes : int(cell)*s.rowBytes+span]
			if o.Kind == batch.KVSave {
				copy(part, store)
			} else {
				copy(store, part)
			}
		}
	}
}

// layerBytes is layer l's K (kv 0) or V (kv 1) storage as little-endian bytes (a view).
func (s *testStore) layerBytes(l, kv int) []byte {
	switch s.cfg.DType {
	case quant.F32:
		return f32View([][]float32{s.k32[l], s.v32[l]}[kv])
	case quant.F16:
		return u16View([][]uint16{s.k16[l], s.v16[l]}[kv])
	}
	return [][]byte{s.k8[l], s.v8[l]}[kv]
}

// opImport brings the tier's blocks of a document's prefix back as Import does for the engine
// (full blocks by Key in chain order, then a partial block continuing them), then attaches the
// prefix to an empty sequence, whose contents the next check compares with a fresh decode.
func (r *randTest) opImport() {
	t := r.c.tier
	doc := r.rng.IntN(len(r.docs))
	d := r.docs[doc]
	prompt := d[:r.rng.IntN(len(d)+1)]
	bs := int(r.c.bs)
	keys := ChainKeys(nil, prompt, bs)
	var ibs []ImportBlock
	var data [][]byte
	parent := RootKey
	depth := 0
	for ; depth < len(keys); depth++ {
		b, ok := t.blocks[keys[depth]]
		if !ok {
			break
		}
		ibs = append(ibs, ImportBlock{Depth: int32(depth), Cells: int32(bs)})
		data = append(data, b.data)
		parent = keys[depth]
	}
	if depth == len(keys) {
		rest := prompt[depth*bs:]
		best := -1
		var bestData []byte
		for _, b := range t.blocks {
			if b.parent == parent && int(b.depth) == depth && len(b.toks) < bs && len(b.toks) <= len(rest) &&
				slices.Equal(b.toks, rest[:len(b.toks)]) && len(b.toks) > best {
				best, bestData = len(b.toks), b.data
			}
		}
		if best > 0 {
			ibs = append(ibs, ImportBlock{Depth: int32(depth), Cells: int32(best)})
			data = append(data, bestData)
		}
	}
	r.log = append(r.log, fmt.Sprintf("Import(%d tokens, %d blocks)", len(prompt), len(ibs)))
	before := r.c.MatchPrefix(prompt)
	imgs, held := r.c.Import(Salt{}, prompt, ibs, nil)
	loaded := 0
	for i, idx := range imgs {
		if idx < 0 {
			continue
		}
		loaded++
		if ibs[i].Cells < r.c.bs {
			r.stats["import partial"]++
		}
		for int(idx) >= len(t.loads) {
			t.loads = append(t.loads, nil)
		}
		t.loads[idx] = data[i]
	}
	if loaded > 0 {
		r.stats["import"]++
	}
	after := r.c.MatchPrefix(prompt)
	if after < before || after < held/bs*bs {
		r.fatalf("Import held %d of %d tokens, MatchPrefix %d before, %d after", held, len(prompt), before, after)
	}
	if after > before {
		r.stats["import gained"]++
	}
	for s := range r.m.seqs {
		if len(r.m.seqs[s]) == 0 {
			r.attach(s, prompt, doc)
			return
		}
	}
}

// TestRandomOpsWithTier is TestRandomOpsAgainstReference with a disk tier's stand-in: blocks
// the cache evicts are spilled (KVSave, their bytes kept by the tier, some turned down), and
// Import brings them back (KVLoad) into later prompts' prefixes. The checks compare every
// sequence's cells with a fresh decode (kOf), so a block whose bytes did not survive the trip
// out and back, or that came back at the wrong place, fails.
func TestRandomOpsWithTier(t *testing.T) {
	tests := []struct {
		name  string
		dtype quant.Type
		seeds int
	}{
		{name: "f32", dtype: quant.F32, seeds: 20},
		{name: "f16", dtype: quant.F16, seeds: 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, randomRun{
			seeds:  tc.seeds,
			stream: 0x71e5,
			cfg:    Config{NLayers: 2, KVDim: 2, BlockSize: 4, NumBlocks: 14, MaxSeqs: 4, DType: tc.dtype},
			ops:    300,
			mix: []weightedOp{
				{40, (*randTest).opReserve},
				{50, (*randTest).opRemove},
				{55, (*randTest).opCopy},
				{58, (*randTest).opDiscard},
				{68, (*randTest).opAttach},
				{76, (*randTest).opTurn},
				{86, (*randTest).opImport},
				{100, (*randTest).opFree},
			},
			want:  []string{"import", "import gained", "import partial", "attach hit", "spilled"},
			setup: func(r *randTest) { r.c.enableTier(func() bool { return r.rng.IntN(5) == 0 }) },
			done:  func(r *randTest) { r.stats["spilled"] += r.c.tier.spilled },
		}.run)
	}
}
