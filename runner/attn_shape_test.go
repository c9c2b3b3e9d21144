package runner

import (
	"fmt"
	"strings"
	"testing"

	"ubatch/batch"
	"ubatch/ops"
	"ubatch/quant"
)

// shapeProbe is a Graph without weights over KV layers of different shapes (Hparams.KVShapes)
// and a layer that reuses KV layer 0 (SharedAttention's attention, without rope): every token's
// Q, K and V rows are drawn from its position, with letters of their own per layer, and each
// layer's output per position is kept.
type shapeProbe struct {
	h   Hparams
	p   AttnParams
	out [3]map[int32][]float32 // per layer (2: the one sharing layer 0's KV): position -> output
}

// shapeLetters are the letters qkvRow draws each layer's Q, K and V with; the shared layer has
// its own queries over layer 0's keys and values.
var shapeLetters = [3]string{"qkv", "QKV", "xkv"}

func (g *shapeProbe) Hparams() *Hparams       { return &g.h }
func (g *shapeProbe) Matrices() []*Weight     { return nil }
func (g *shapeProbe) LayerRope(int) *ops.Rope { return nil }
func (g *shapeProbe) Forward(c *Runtime, ub *batch.UBatch) {
	s := &c.S
	for li, kvl := range []int{0, 1, 0} {
		a, abc := g.h.Shape(kvl), shapeLetters[li]
		qd, kvd := a.QDim(), a.KVDim()
		for t, pos := range ub.Pos {
			qkvRow(pos, abc[0], s.Q[t*qd:(t+1)*qd])
			qkvRow(pos, abc[1], s.K[t*kvd:(t+1)*kvd])
			qkvRow(pos, abc[2], s.V[t*kvd:(t+1)*kvd])
		}
		if li == 2 {
			c.Attention(kvl, s.Q, nil, nil, s.Att, g.p)
		} else {
			c.Attention(kvl, s.Q, s.K, s.V, s.Att, g.p)
		}
		for t, pos := range ub.Pos {
			g.out[li][pos] = append([]float32(nil), s.Att[t*qd:(t+1)*qd]...)
		}
	}
}

// TestAttentionShapes runs the runner's attention, exact and tiled (the Go twin where the CPU
// has no assembly for it), over F32, F16 and Q8_0 caches whose two KV layers differ in head size
// and KV head count (Gemma 4's sliding and full layers), and over a layer that reads layer 0's
// cells without storing (its shared KV layers), against a float64 softmax: 21 tokens in
// micro-batches of 8, so that history comes from earlier micro-batches.
func TestAttentionShapes(t *testing.T) {
	const n = 21
	h := Hparams{Dim: 8, NLayers: 3, KVLayers: 2, NHeads: 4, NKVHeads: 2, HeadDim: 32, FFN: 8, Vocab: 8, CtxTrain: 64,
		KVShapes: []AttnShape{{NHeads: 4, NKVHeads: 2, HeadDim: 32}, {NHeads: 4, NKVHeads: 1, HeadDim: 96}}}
	for _, kv := range []quant.Type{quant.F32, quant.F16, quant.Q8_0} {
		for _, tiled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/tiled=%v", kv, tiled), func(t *testing.T) {
				g := &shapeProbe{h: h, p: AttnParams{Window: 6}}
				for i := range g.out {
					g.out[i] = map[int32][]float32{}
				}
				c, err := New(g, Options{NCtx: 64, NUBatch: 8, NBatch: 32, Threads: 2, KVType: kv, TiledAttention: tiled})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.tiledGo = true
				if got := c.KVConfig().KVDims; len(got) != 2 || got[0] != 64 || got[1] != 96 || c.KVConfig().KVDim != 96 {
					t.Fatalf("KV widths %v (KVDim %d), want [64 96] (96)", got, c.KVConfig().KVDim)
				}
				var b batch.Batch
				for p := range int32(n) {
					b.Add(1, p, []int32{0}, false)
				}
				s, err := NewSession(c)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Decode(&b); err != nil {
					t.Fatal(err)
				}
				for li, kvl := range []int{0, 1, 0} {
					worst := 0.0
					for p := range int32(n) {
						d, _ := attnDiff(t, h.Shape(kvl), kv, p, 6, nil, shapeLetters[li], g.out[li][p])
						worst = max(worst, d)
					}
					if worst > 1e-4 {
						t.Errorf("layer %d (KV layer %d, %+v): attention %.3g (max |difference|) from the reference", li, kvl, h.Shape(kvl), worst)
					}
				}
			})
		}
	}
}

// TestKVShapesChecked: New refuses per-layer shapes it cannot lay out, naming the layer.
func TestKVShapesChecked(t *testing.T) {
	base := Hparams{Dim: 8, NLayers: 2, NHeads: 4, NKVHeads: 2, HeadDim: 32, FFN: 8, Vocab: 8, CtxTrain: 64}
	cases := []struct {
		name   string
		shapes []AttnShape
		kv     quant.Type
		want   string
	}{
		{name: "valid", shapes: []AttnShape{{4, 2, 32}, {4, 1, 64}}, kv: quant.Q8_0},
		{name: "one shape for two layers", shapes: []AttnShape{{4, 2, 32}}, want: "1 KV layer shapes for 2 KV layers"},
		{name: "KV heads not dividing", shapes: []AttnShape{{4, 2, 32}, {4, 3, 64}}, want: "KV layer 1: 4 query heads over 3 KV heads"},
		{name: "no KV heads", shapes: []AttnShape{{4, 2, 32}, {4, 0, 64}}, want: "KV layer 1"},
		{name: "a head Q8_0 cannot block", shapes: []AttnShape{{4, 2, 32}, {4, 1, 48}}, kv: quant.Q8_0, want: "multiple of 32, this model's is 48"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := base
			h.KVShapes = tc.shapes
			c, err := New(&shapeProbe{h: h}, Options{NCtx: 32, Threads: 1, KVType: tc.kv})
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "":
				c.Close()
			case err == nil:
				c.Close()
				t.Fatalf("New accepted %+v", tc.shapes)
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}
