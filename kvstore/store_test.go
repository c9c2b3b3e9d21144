package kvstore

import (
	"encoding/binary"
	"math"
	"runtime"
	"slices"
	"testing"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/quant"
)

// TestPoolBytesMatchesNew allocates caches (a manager and its store) and checks that what they
// take from the heap is kvcache.PoolBytes plus bookkeeping that does not grow with the cells of
// a block.
func TestPoolBytesMatchesNew(t *testing.T) {
	tests := []struct {
		name string
		cfg  kvcache.Config
	}{
		{name: "F16 small blocks", cfg: kvcache.Config{NLayers: 5, KVDim: 32, BlockSize: 16, NumBlocks: 256, DType: quant.F16, MaxSeqs: 8}},
		{name: "F32 large blocks", cfg: kvcache.Config{NLayers: 4, KVDim: 128, BlockSize: 256, NumBlocks: 16, DType: quant.F32, MaxSeqs: 4}},
		{name: "Q8_0", cfg: kvcache.Config{NLayers: 3, KVDim: 96, BlockSize: 16, NumBlocks: 64, DType: quant.Q8_0, MaxSeqs: 2}},
		{name: "F16 one layer", cfg: kvcache.Config{NLayers: 1, KVDim: 8, BlockSize: 16, NumBlocks: 1024, DType: quant.F16, MaxSeqs: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, err := kvcache.PoolBytes(tc.cfg.NLayers, tc.cfg.KVDim, tc.cfg.NumBlocks*tc.cfg.BlockSize, tc.cfg.DType)
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			m, err := kvcache.NewManager(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(tc.cfg, func(int, []float32, int32) {})
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			runtime.KeepAlive(m)
			runtime.KeepAlive(s)
			got := int64(after.TotalAlloc - before.TotalAlloc)
			// Per block: refcount, hashes, flags, links, free list, fill, two map entries; per
			// sequence its state and scheduling scratch; plus fixed headers (two objects now, a manager
			// and a store, where there was one cache: some 5 KB more of rounding on the largest rows).
			slack := int64(tc.cfg.NumBlocks)*256 + int64(tc.cfg.MaxSeqs)*256 + 24<<10
			t.Logf("allocated %d bytes, PoolBytes %d, bookkeeping %d", got, want, got-want)
			if got < want || got > want+slack {
				t.Fatalf("allocated %d bytes; PoolBytes says %d (+ at most %d of bookkeeping)", got, want, slack)
			}
		})
	}
}

// rowOf reads cell's K (or V) row of layer l as float32, decoding the stored bytes itself
// (little-endian floats and halves, ggml's Q8_0 blocks).
func rowOf(s *Store, l, cell int, v bool) []float32 {
	kv, rb := s.cfg.LayerDim(l), s.RowBytes(l)
	src := s.K(l)
	if v {
		src = s.V(l)
	}
	row := src[cell*rb : (cell+1)*rb]
	out := make([]float32, kv)
	switch s.cfg.DType {
	case quant.F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:]))
		}
	case quant.F16:
		for i := range out {
			out[i] = quant.F16ToF32(binary.LittleEndian.Uint16(row[2*i:]))
		}
	case quant.Q8_0:
		if err := quant.Dequantize(quant.Q8_0, row, out); err != nil {
			panic(err)
		}
	}
	return out
}

// TestApply writes rows, applies copies (overlapping downwards too) and shifts, and compares
// every layer's rows with the same operations done on plain float32 rows, with one width for
// every layer and with layers of different widths (Gemma 4's).
func TestApply(t *testing.T) {
	type widths struct {
		name  string
		kvDim int
		dims  []int
	}
	for _, w := range []widths{{name: "one width", kvDim: 32}, {name: "per-layer widths", kvDim: 64, dims: []int{64, 32}}} {
		for _, dt := range []quant.Type{quant.F32, quant.F16, quant.Q8_0} {
			t.Run(w.name+"/"+dt.String(), func(t *testing.T) { testApply(t, dt, w.kvDim, w.dims) })
		}
	}
}

func testApply(t *testing.T, dt quant.Type, kvDim int, dims []int) {
	cfg := kvcache.Config{NLayers: 2, KVDim: kvDim, KVDims: dims, BlockSize: 4, NumBlocks: 4, DType: dt, MaxSeqs: 1}
	shifts := 0
	add := func(l int, k []float32, d int32) {
		if len(k) != cfg.LayerDim(l) {
			t.Errorf("layer %d: a key row of %d to shift, want %d", l, len(k), cfg.LayerDim(l))
		}
		shifts++
		for i := range k {
			k[i] += float32(d)
		}
	}
	s, err := New(cfg, add)
	if err != nil {
		t.Fatal(err)
	}
	const cells = 16
	// Reference: ref[l][cell] = the value every element of the K row holds; V is -K.
	var ref [2][cells]float32
	ids := make([]int32, cells)
	for l := range 2 {
		wd := cfg.LayerDim(l)
		k, v := make([]float32, cells*wd), make([]float32, cells*wd)
		for c := range cells {
			ref[l][c] = float32(c + 10*l)
			ids[c] = int32(c)
			for d := range wd {
				k[c*wd+d], v[c*wd+d] = ref[l][c], -ref[l][c]
			}
		}
		s.Write(l, ids, k, v)
	}
	ops := []batch.KVOp{
		{Kind: batch.KVCopy, Src: 4, Dst: 12, N: 3},
		{Kind: batch.KVCopy, Src: 2, Dst: 0, N: 4}, // overlapping, downwards
		{Kind: batch.KVShift, Dst: 12, N: 2, Delta: -3},
		{Kind: batch.KVShift, Dst: 0, N: 1, Delta: -3},
		{Kind: batch.KVShift, Dst: 5, N: 1, Delta: 2},
	}
	if err := s.Apply(ops); err != nil {
		t.Fatal(err)
	}
	refV := ref
	for l := range 2 {
		r, rv := ref[l][:], refV[l][:]
		copy(r[12:15], r[4:7])
		copy(rv[12:15], rv[4:7])
		copy(r[0:4], r[2:6])
		copy(rv[0:4], rv[2:6])
		r[12] -= 3
		r[13] -= 3
		r[0] -= 3
		r[5] += 2
	}
	if shifts != 2*4 {
		t.Errorf("%d key rotations, want 8 (4 cells x 2 layers)", shifts)
	}
	for l := range 2 {
		for c := range cells {
			gk, gv := rowOf(s, l, c, false), rowOf(s, l, c, true)
			tol := float32(0)
			if dt != quant.F32 {
				tol = 0.05 * max(1, abs(ref[l][c]))
			}
			if abs(gk[0]-ref[l][c]) > tol || abs(gv[0]+refV[l][c]) > tol || slices.Min(gk) != slices.Max(gk) {
				t.Fatalf("layer %d cell %d: K %v V %v, want %v, %v", l, c, gk[0], gv[0], ref[l][c], -refV[l][c])
			}
		}
	}
	if err := s.Apply([]batch.KVOp{{Kind: batch.KVCopy, Src: 14, Dst: 0, N: 3}}); err == nil {
		t.Fatal("an operation past the last cell was applied")
	}
}

func abs(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// TestApplyAllocatesNothing: the per-step work of the store allocates nothing.
func TestApplyAllocatesNothing(t *testing.T) {
	s, err := New(kvcache.Config{NLayers: 2, KVDim: 32, BlockSize: 4, NumBlocks: 4, DType: quant.F16, MaxSeqs: 1}, func(int, []float32, int32) {})
	if err != nil {
		t.Fatal(err)
	}
	ops := []batch.KVOp{{Kind: batch.KVCopy, Src: 0, Dst: 4, N: 4}, {Kind: batch.KVShift, Dst: 4, N: 4, Delta: 1}}
	if n := testing.AllocsPerRun(50, func() { _ = s.Apply(ops) }); n != 0 {
		t.Fatalf("Apply allocates %v times", n)
	}
}
