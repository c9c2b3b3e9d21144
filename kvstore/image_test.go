package kvstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/quant"
)

// TestImagesRoundTrip saves cells of every type into images and loads them into other cells:
// the rows come back bit for bit, and a wrong-sized or missing image, or cells past the store,
// are refused; with one width for every layer and with layers of different widths.
func TestImagesRoundTrip(t *testing.T) {
	for _, dims := range [][]int{nil, {64, 32, 64}} {
		for _, dt := range []quant.Type{quant.F32, quant.F16, quant.Q8_0} {
			t.Run(fmt.Sprint(dt, dims), func(t *testing.T) { testImages(t, dt, dims) })
		}
	}
}

func testImages(t *testing.T, dt quant.Type, dims []int) {
	cfg := kvcache.Config{NLayers: 3, KVDim: 32, KVDims: dims, BlockSize: 4, NumBlocks: 6, MaxSeqs: 1, DType: dt}
	if dims != nil {
		cfg.KVDim = 64
	}
	s, err := New(cfg, func(int, []float32, int32) {})
	if err != nil {
		t.Fatal(err)
	}
	if dims != nil && s.ImageBytes(5) != 2*5*int64(2*s.RowBytes(0)+s.RowBytes(1)) {
		t.Fatalf("ImageBytes(5) %d, want 2·5 cells × the layers' rows", s.ImageBytes(5))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	k, v := make([]float32, 8*cfg.KVDim), make([]float32, 8*cfg.KVDim)
	for i := range k {
		k[i], v[i] = rng.Float32()*4-2, rng.Float32()*4-2
	}
	cells := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	for l := range cfg.NLayers {
		n := 8 * cfg.LayerDim(l)
		s.Write(l, cells, k[:n], v[:n])
	}
	img := make([]byte, s.ImageBytes(5))
	other := make([]byte, s.ImageBytes(5))
	ops := []batch.KVOp{{Kind: batch.KVSave, Src: 2, Dst: 0, N: 5}, {Kind: batch.KVLoad, Src: 0, Dst: 12, N: 5},
		{Kind: batch.KVSave, Src: 12, Dst: 1, N: 5}}
	if err := s.ApplyImages(ops, [][]byte{img, other}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(img, other) || bytes.Count(img, []byte{0}) == len(img) {
		t.Fatal("cells loaded from an image do not read back as saved")
	}
	for l := range cfg.NLayers {
		rb := s.RowBytes(l)
		kb, vb := s.layerBytes(l)
		if !bytes.Equal(kb[2*rb:7*rb], kb[12*rb:17*rb]) || !bytes.Equal(vb[2*rb:7*rb], vb[12*rb:17*rb]) {
			t.Fatalf("layer %d: loaded rows differ from the saved ones", l)
		}
	}
	bad := [][]batch.KVOp{
		{{Kind: batch.KVLoad, Src: 0, Dst: 0, N: 4}},  // an image of 5 cells for 4
		{{Kind: batch.KVSave, Src: 0, Dst: 2, N: 5}},  // no image 2
		{{Kind: batch.KVLoad, Src: 0, Dst: 20, N: 5}}, // past the cells
	}
	for i, b := range bad {
		if err := s.ApplyImages(b, [][]byte{img}); err == nil {
			t.Fatalf("bad op list %d accepted", i)
		}
	}
}
