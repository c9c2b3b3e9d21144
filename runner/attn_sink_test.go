package runner

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ubatch/batch"
	"ubatch/ops"
	"ubatch/quant"
)

// attnProbe is a Graph without weights whose Forward gives every token Q, K and V rows drawn
// from its position (qkvRow), attends them with p and keeps each position's output.
type attnProbe struct {
	h   Hparams
	p   AttnParams
	out map[int32][]float32 // position -> attention output [QDim]
}

func (g *attnProbe) Hparams() *Hparams       { return &g.h }
func (g *attnProbe) Matrices() []*Weight     { return nil }
func (g *attnProbe) LayerRope(int) *ops.Rope { return nil }
func (g *attnProbe) Forward(c *Runtime, ub *batch.UBatch) {
	s, qd, kvd := &c.S, g.h.QDim(), g.h.KVDim()
	for t, pos := range ub.Pos {
		qkvRow(pos, 'q', s.Q[t*qd:(t+1)*qd])
		qkvRow(pos, 'k', s.K[t*kvd:(t+1)*kvd])
		qkvRow(pos, 'v', s.V[t*kvd:(t+1)*kvd])
	}
	c.Attention(0, s.Q, s.K, s.V, s.Att, g.p)
	for t, pos := range ub.Pos {
		g.out[pos] = append([]float32(nil), s.Att[t*qd:(t+1)*qd]...)
	}
}

// qkvRow fills row with the position's random q, k or v values (std 1.5 for q: scores of a few
// units, a softmax far from uniform).
func qkvRow(pos int32, which byte, row []float32) {
	r := rand.New(rand.NewPCG(uint64(pos), uint64(which)))
	std := 1.0
	if which == 'q' {
		std = 1.5
	}
	for i := range row {
		row[i] = float32(r.NormFloat64() * std)
	}
}

// cacheRound is the row as a KV cache of type dt stores it.
func cacheRound(t *testing.T, dt quant.Type, row []float32) []float32 {
	qt := map[quant.Type]quant.Type{quant.F32: quant.F32, quant.F16: quant.F16, quant.Q8_0: quant.Q8_0}[dt]
	buf := make([]byte, qt.RowSize(len(row)))
	out := make([]float32, len(row))
	if err := quant.Quantize(qt, row, buf); err != nil {
		t.Fatal(err)
	}
	if err := quant.Dequantize(qt, buf, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAttentionSinks runs the runner's attention, exact and tiled (on the Go twin where the CPU
// has no assembly for it), over F32, F16 and Q8_0 caches, with and without a window, against a
// float64 softmax in which every head's sink joins the denominator. A prompt of 21 tokens in
// micro-batches of 8 has history from earlier micro-batches. Without the sinks the outputs are
// far from the reference (checked too: the test sees them).
func TestAttentionSinks(t *testing.T) {
	const n = 21
	h := Hparams{Dim: 8, NLayers: 1, NHeads: 4, NKVHeads: 2, HeadDim: 32, FFN: 8, Vocab: 8, CtxTrain: 64}
	sinks := []float32{0.5, 3, -1, 2}
	for _, kv := range []quant.Type{quant.F32, quant.F16, quant.Q8_0} {
		for _, tiled := range []bool{false, true} {
			for _, window := range []int32{0, 5} {
				name := fmt.Sprintf("%v/tiled=%v/window=%d", kv, tiled, window)
				t.Run(name, func(t *testing.T) {
					g := &attnProbe{h: h, p: AttnParams{Window: window, Sinks: sinks}, out: map[int32][]float32{}}
					c, err := New(g, Options{NCtx: 64, NUBatch: 8, NBatch: 32, Threads: 2, KVType: kv, TiledAttention: tiled})
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					c.tiledGo = true
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
					worst, worstNoSink := 0.0, 0.0
					for p := range int32(n) {
						d, dNo := attnDiff(t, h.Shape(0), kv, p, window, sinks, "qkv", g.out[p])
						worst, worstNoSink = max(worst, d), max(worstNoSink, dNo)
					}
					// F16 and Q8_0 round q·k's inputs, not only the cells: the exact path
					// widens from the same rounded cells, so 1e-4 holds for all three.
					if worst > 1e-4 {
						t.Errorf("attention %.3g (max |difference|) from the reference with sinks", worst)
					}
					if worstNoSink < 0.1 {
						t.Errorf("the reference without sinks is %.3g from it: the sinks do not matter here", worstNoSink)
					}
				})
			}
		}
	}
}

// attnDiff returns the largest |got - reference| of position p's output of attention of shape a
// over a cache of kv, its q, k and v rows drawn by qkvRow with the letters of qkv, and the
// largest from the reference without sinks (how much the sinks matter; nil sinks: none).
func attnDiff(t *testing.T, a AttnShape, kv quant.Type, p, window int32, sinks []float32, qkv string, got []float32) (float64, float64) {
	hd, kvd, rep := a.HeadDim, a.KVDim(), a.NHeads/a.NKVHeads
	q := make([]float32, a.QDim())
	qkvRow(p, qkv[0], q)
	var ks, vs [][]float32
	lo := int32(-1)
	if window > 0 {
		lo = p - window
	}
	for c := lo + 1; c <= p; c++ {
		if c < 0 {
			continue
		}
		k, v := make([]float32, kvd), make([]float32, kvd)
		qkvRow(c, qkv[1], k)
		qkvRow(c, qkv[2], v)
		ks, vs = append(ks, cacheRound(t, kv, k)), append(vs, cacheRound(t, kv, v))
	}
	worst, noSink := 0.0, 0.0
	scale := 1 / math.Sqrt(float64(hd))
	for hh := range a.NHeads {
		g := hh / rep
		s := make([]float64, len(ks))
		mx := math.Inf(-1)
		for j := range ks {
			for d := range hd {
				s[j] += float64(q[hh*hd+d]) * float64(ks[j][g*hd+d])
			}
			s[j] *= scale
			mx = max(mx, s[j])
		}
		sum := 0.0
		for j := range s {
			s[j] = math.Exp(s[j] - mx)
			sum += s[j]
		}
		withSink := sum
		if sinks != nil {
			withSink += math.Exp(float64(sinks[hh]) - mx)
		}
		for d := range hd {
			var acc float64
			for j := range s {
				acc += s[j] * float64(vs[j][g*hd+d])
			}
			o := float64(got[hh*hd+d])
			worst = max(worst, math.Abs(o-acc/withSink))
			if math.IsNaN(o) {
				worst = math.Inf(1)
			}
			noSink = max(noSink, math.Abs(o-acc/sum))
		}
	}
	return worst, noSink
}
