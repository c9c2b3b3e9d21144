package engine

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/kvfile"
	"ubatch/kvstore"
	"ubatch/quant"
)

// storeDecoder is fakeDecoder with real K/V memory: every token's K and V rows are a function of
// its token and position, written at the cells the schedule gave it, after the schedule's store
// operations. So an exported block can be checked cell by cell, and imported ones are what the
// decode would have written.
type storeDecoder struct {
	*fakeDecoder
	store *kvstore.Store
}

func newStoreDecoder(t *testing.T, blocks, blockSize, seqs int) *storeDecoder {
	f := newFake(t, blocks, blockSize, seqs)
	st, err := kvstore.New(f.cfg, func(int, []float32, int32) {})
	if err != nil {
		t.Fatal(err)
	}
	return &storeDecoder{fakeDecoder: f, store: st}
}

func kvRow(tok, pos int32) (k, v [2]float32) {
	return [2]float32{float32(tok), float32(pos)}, [2]float32{float32(tok) + 0.5, float32(pos) * 2}
}

func (d *storeDecoder) Decode(b *batch.Batch) error {
	if err := d.store.ApplyImages(b.KV.Ops, b.KV.Images); err != nil {
		return err
	}
	k := make([]float32, 0, 2*b.Len())
	v := make([]float32, 0, 2*b.Len())
	for i := range b.Len() {
		kr, vr := kvRow(b.Tokens[i], b.Pos[i])
		k, v = append(k, kr[:]...), append(v, vr[:]...)
	}
	d.store.Write(0, b.KV.Slots, k, v)
	return d.fakeDecoder.Decode(b)
}

func (d *storeDecoder) ApplyKV(ops []batch.KVOp, images [][]byte) error {
	return d.store.ApplyImages(ops, images)
}

// blockSource hands out fixed blocks, as a peer that holds them would.
type blockSource struct{ blocks []kvfile.Block }

func (s *blockSource) Name() string { return "test" }
func (s *blockSource) Probe(q *Lookup) Hit {
	n := max(0, min(len(s.blocks), len(q.Keys))-q.From)
	return Hit{Blocks: n, Cells: n * q.BlockSize, Bytes: int64(n) * 64}
}
func (s *blockSource) Fetch(ctx context.Context, q *Lookup, h Hit) ([]kvfile.Block, error) {
	return s.blocks[q.From : q.From+h.Blocks], nil
}
func (s *blockSource) ReadCost(int64) time.Duration { return 0 }

func testLayout(bs int) kvfile.Layout {
	return kvfile.Layout{Model: kvfile.ModelID{7}, DType: quant.F32, BlockSize: bs, Layers: []kvfile.Layer{{KVHeads: 1, HeadDim: 2}}}
}

// TestExportBlocks: blocks exported from one engine hold what its decode wrote, chained by key;
// imported into another engine (as the peer tier does) they serve the same prompt as cached
// tokens with the same output.
func TestExportBlocks(t *testing.T) {
	const bs = 4
	lim := Limits{NCtx: 64 * bs, NSeqMax: 4, NBatch: 64, Vocab: vocab}
	a := newStoreDecoder(t, 64, bs, 4)
	ea, err := New(a, lim, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ea.ExportBlocks(context.Background(), kvcache.Salt{}, prompt(8, 1), 2); !errors.Is(err, ErrNoTiers) {
		t.Fatalf("ExportBlocks without tiers: %v", err)
	}
	if !ea.SetTiers(nil, nil, testLayout(bs)) {
		t.Fatal("SetTiers refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-ea.Done() }()
	go ea.Run(ctx)

	p := prompt(5*bs+2, 3)
	req := Request{Prompt: p, MaxTokens: 6, Sampling: greedy()}
	st, err := ea.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	wantOut, _ := collect(t, st)

	blocks, err := ea.ExportBlocks(context.Background(), kvcache.Salt{}, p[:5*bs], 3)
	if err != nil || len(blocks) != 3 {
		t.Fatalf("ExportBlocks(max 3) = %d blocks, %v", len(blocks), err)
	}
	blocks, err = ea.ExportBlocks(context.Background(), kvcache.Salt{}, p[:5*bs], 10)
	if err != nil || len(blocks) != 5 {
		t.Fatalf("ExportBlocks = %d blocks, %v; want the prompt's 5 full blocks", len(blocks), err)
	}
	keys := kvcache.ChainKeys(nil, p, bs)
	for i, b := range blocks {
		if int(b.Depth) != i || b.Key != keys[i] || !slices.Equal(b.Tokens, p[i*bs:(i+1)*bs]) {
			t.Fatalf("block %d: depth %d, key ok %v, tokens %v", i, b.Depth, b.Key == keys[i], b.Tokens)
		}
		// Data: [layer 0][K rows of the 4 cells][V rows], float32 little-endian.
		for j := range bs {
			pos := int32(i*bs + j)
			kr, vr := kvRow(p[pos], pos)
			if got := f32At(b.Data, 2*j); got != kr[0] || f32At(b.Data, 2*j+1) != kr[1] {
				t.Fatalf("block %d cell %d: K %v, want %v", i, j, got, kr)
			}
			if got := f32At(b.Data, 2*bs+2*j); got != vr[0] || f32At(b.Data, 2*bs+2*j+1) != vr[1] {
				t.Fatalf("block %d cell %d: V %v, want %v", i, j, got, vr)
			}
		}
	}
	if other, err := ea.ExportBlocks(context.Background(), kvcache.Salt{}, prompt(3*bs, 40), 10); err != nil || len(other) != 0 {
		t.Fatalf("a prompt the cache never saw: %d blocks, %v", len(other), err)
	}

	// Node b imports them through a tier and serves p from them.
	b := newStoreDecoder(t, 64, bs, 4)
	eb, err := New(b, lim, Config{})
	if err != nil {
		t.Fatal(err)
	}
	eb.SetTiers([]BlockSource{&blockSource{blocks: blocks}}, nil, testLayout(bs))
	ctxB, cancelB := context.WithCancel(context.Background())
	defer func() { cancelB(); <-eb.Done() }()
	go eb.Run(ctxB)
	st, err = eb.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got, last := collect(t, st)
	if !slices.Equal(got, wantOut) || last.Usage.CachedTokens != 5*bs {
		t.Fatalf("node b: %v with %d cached tokens; node a: %v, want %d cached", got, last.Usage.CachedTokens, wantOut, 5*bs)
	}
	// What b's store now holds for p is a's: export it back.
	again, err := eb.ExportBlocks(context.Background(), kvcache.Salt{}, p[:5*bs], 10)
	if err != nil || len(again) != 5 {
		t.Fatalf("re-export from b: %d blocks, %v", len(again), err)
	}
	for i := range again {
		if !slices.Equal(again[i].Data, blocks[i].Data) {
			t.Fatalf("block %d changed on its way through b", i)
		}
	}
}

func f32At(b []byte, i int) float32 {
	u := uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
	return math.Float32frombits(u)
}

// optimisticSource says it may hold every block (as the peer tier does when some peer is
// alive) but brings nothing.
type optimisticSource struct{ fetches atomic.Int32 }

func (s *optimisticSource) Name() string { return "optimistic" }
func (s *optimisticSource) Probe(q *Lookup) Hit {
	n := len(q.Keys) - q.From
	return Hit{Blocks: n, Cells: n * q.BlockSize, Bytes: int64(n)}
}
func (s *optimisticSource) Fetch(context.Context, *Lookup, Hit) ([]kvfile.Block, error) {
	s.fetches.Add(1)
	return nil, nil
}
func (s *optimisticSource) ReadCost(int64) time.Duration { return 0 }

// TestEmptyFetchIsNotRepeated: a tier that brings nothing is asked once per request, which is
// then computed (it used to be fetched again at every admission turn, forever).
func TestEmptyFetchIsNotRepeated(t *testing.T) {
	const bs = 4
	d := newStoreDecoder(t, 64, bs, 4)
	e, err := New(d, Limits{NCtx: 64 * bs, NSeqMax: 4, NBatch: 64, Vocab: vocab}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	src := &optimisticSource{}
	e.SetTiers([]BlockSource{src}, nil, testLayout(bs))
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-e.Done() }()
	go e.Run(ctx)
	st, err := e.Submit(context.Background(), Request{Prompt: prompt(6*bs, 9), MaxTokens: 3, Sampling: greedy()})
	if err != nil {
		t.Fatal(err)
	}
	got, last := collect(t, st)
	if len(got) != 3 || last.Usage.CachedTokens != 0 || src.fetches.Load() != 1 {
		t.Fatalf("%d tokens, %d cached, %d fetches; want 3, 0, 1", len(got), last.Usage.CachedTokens, src.fetches.Load())
	}
}
