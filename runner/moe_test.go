package runner

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"ubatch/batch"
	"ubatch/internal/testdata"
	"ubatch/ops"
	"ubatch/quant"
)

// moeGraph is a graph of one synthetic mixture-of-experts layer, for MoEFFN's tests: Forward is
// never called, the tests set the micro-batch's size and XN themselves.
type moeGraph struct {
	h Hparams
	x Experts
}

func (g *moeGraph) Hparams() *Hparams               { return &g.h }
func (g *moeGraph) Matrices() []*Weight             { return g.x.AppendMatrices(nil) }
func (g *moeGraph) LayerRope(int) *ops.Rope         { return nil }
func (g *moeGraph) Forward(*Runtime, *batch.UBatch) {}

// moeLayer is a synthetic layer: dim 256, experts of ffn 192 (256 for the K-quants, whose
// blocks are 256) in weight type wt (router F32),
// random weights (router std 3/sqrt(dim), so that routing is decisive, as in the shared file),
// biases when bias is set, packed where the CPU has panels when pack is set.
func moeLayer(t testing.TB, wt quant.Type, experts, used int, bias, pack bool) *moeGraph {
	const dim = 256
	ffn := 192
	if wt.BlockSize() > ffn {
		ffn = 256
	}
	rng := rand.New(rand.NewPCG(1, uint64(experts)))
	mat := func(name string, typ quant.Type, rows, cols int, std float64) Weight {
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * std)
		}
		data := make([]byte, rows*typ.RowSize(cols))
		if err := quant.Quantize(typ, v, data); err != nil {
			t.Fatal(err)
		}
		w, err := NewWeight(name, typ, rows, cols, data)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.1)
		}
		return v
	}
	views := func(name string, rows, cols int) []Weight {
		ws, err := ExpertViews(name, mat(name, wt, experts*rows, cols, 1/math.Sqrt(float64(cols))), experts)
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}
	g := &moeGraph{h: Hparams{Dim: dim, NLayers: 1, NHeads: 4, NKVHeads: 4, HeadDim: 64, FFN: ffn, Vocab: 1, CtxTrain: 64, Eps: 1e-6,
		NExperts: experts, NExpertsUsed: used, ExpertFFN: ffn}}
	g.x = Experts{
		Router: mat("router", quant.F32, experts, dim, 3/math.Sqrt(dim)),
		Gate:   views("gate", ffn, dim), Up: views("up", ffn, dim), Down: views("down", dim, ffn),
	}
	if bias {
		g.x.RouterBias, g.x.GateBias, g.x.UpBias, g.x.DownBias = vec(experts), vec(experts*ffn), vec(experts*ffn), vec(experts*dim)
	}
	if pack {
		for _, w := range g.Matrices() {
			if quant.CanPack(w.Type, w.Cols, w.Rows) {
				dst := make([]byte, len(w.Data))
				if err := quant.PackRows(w.Type, w.Cols, dst, w.Data); err != nil {
					t.Fatal(err)
				}
				w.SetPacked(dst)
			}
		}
	}
	return g
}

// moeRuntime makes a Runtime for g with micro-batches of up to n tokens.
func moeRuntime(t testing.TB, g *moeGraph, n, threads int) *Runtime {
	c, err := New(g, Options{NCtx: 64, NUBatch: n, NBatch: n, Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// moeReference is MoEFFN computed directly in float64 for one token's input x (len Dim): every
// weight row dequantized, the router's softmax or top-k over exact logits, each chosen expert's
// SwiGLU, summed by weight.
func moeReference(g *moeGraph, gt *Gating, x []float32) []float32 {
	h, ex := &g.h, &g.x
	dot := func(w *Weight, r int, v []float64) float64 {
		row := make([]float32, w.Cols)
		w.Row(r, row)
		var s float64
		for i := range row {
			s += float64(row[i]) * v[i]
		}
		return s
	}
	xv := make([]float64, len(x))
	for i, v := range x {
		xv[i] = float64(v)
	}
	logits := make([]float64, h.NExperts)
	for e := range logits {
		logits[e] = dot(&ex.Router, e, xv)
		if ex.RouterBias != nil {
			logits[e] += float64(ex.RouterBias[e])
		}
	}
	softmax := func(v []float64) {
		m := v[0]
		for _, x := range v {
			m = max(m, x)
		}
		var s float64
		for i := range v {
			v[i] = math.Exp(v[i] - m)
			s += v[i]
		}
		for i := range v {
			v[i] /= s
		}
	}
	if gt.Func == SoftmaxTopK {
		softmax(logits)
	}
	ids := make([]int, h.NExperts)
	for i := range ids {
		ids[i] = i
	}
	sort.SliceStable(ids, func(a, b int) bool { return logits[ids[a]] > logits[ids[b]] })
	ids = ids[:gt.K]
	w := make([]float64, gt.K)
	for j, e := range ids {
		w[j] = logits[e]
	}
	if gt.Func == TopKSoftmax {
		softmax(w)
	} else if gt.Norm {
		var s float64
		for _, v := range w {
			s += v
		}
		for j := range w {
			w[j] /= s
		}
	}
	out := make([]float64, h.Dim)
	act := make([]float64, h.ExpertFFN)
	for j, e := range ids {
		for r := range act {
			gv, uv := dot(&ex.Gate[e], r, xv), dot(&ex.Up[e], r, xv)
			if ex.GateBias != nil {
				gv += float64(ex.GateBias[e*h.ExpertFFN+r])
				uv += float64(ex.UpBias[e*h.ExpertFFN+r])
			}
			act[r] = gv / (1 + math.Exp(-gv)) * uv
		}
		for r := range out {
			d := dot(&ex.Down[e], r, act)
			if ex.DownBias != nil {
				d += float64(ex.DownBias[e*h.Dim+r])
			}
			out[r] += w[j] * d
		}
	}
	res := make([]float32, h.Dim)
	for i, v := range out {
		res[i] = float32(v)
	}
	return res
}

// setInput makes the Runtime compute n tokens whose XN rows are random.
func setInput(c *Runtime, n int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	c.n = n
	for i := range c.S.XN[:n*c.h.Dim] {
		c.S.XN[i] = float32(rng.NormFloat64())
	}
}

// TestMoEFFNMatchesReference compares MoEFFN over micro-batches of 1, 5 and 64 tokens with the
// float64 reference, per token: F32 experts compute the same sums (1e-5), quantized ones (Q8_0,
// MXFP4, Q4_K) round the activations to 8 bits first (1-3% on this shape), packed or in the file
// layout; both gatings, biases (gpt-oss's shape), and K = E.
func TestMoEFFNMatchesReference(t *testing.T) {
	cases := []struct {
		name          string
		wt            quant.Type
		experts, used int
		gating        Gating
		bias, pack    bool
		maxRel        float64
	}{
		{name: "f32 softmax-top2-norm", wt: quant.F32, experts: 8, used: 2, gating: Gating{Func: SoftmaxTopK, K: 2, Norm: true}, maxRel: 1e-5},
		{name: "f32 softmax-top3 no norm", wt: quant.F32, experts: 8, used: 3, gating: Gating{Func: SoftmaxTopK, K: 3}, maxRel: 1e-5},
		{name: "f32 top2-softmax with biases", wt: quant.F32, experts: 8, used: 2, gating: Gating{Func: TopKSoftmax, K: 2}, bias: true, maxRel: 1e-5},
		{name: "f32 every expert", wt: quant.F32, experts: 4, used: 4, gating: Gating{Func: SoftmaxTopK, K: 4, Norm: true}, maxRel: 1e-5},
		{name: "q8_0", wt: quant.Q8_0, experts: 8, used: 2, gating: Gating{Func: SoftmaxTopK, K: 2, Norm: true}, maxRel: 0.03},
		{name: "q8_0 packed", wt: quant.Q8_0, experts: 8, used: 2, gating: Gating{Func: SoftmaxTopK, K: 2, Norm: true}, pack: true, maxRel: 0.03},
		// gpt-oss's expert type and routing (its clamped SwiGLU is not here yet).
		{name: "mxfp4 packed top2-softmax with biases", wt: quant.MXFP4, experts: 8, used: 2, gating: Gating{Func: TopKSoftmax, K: 2}, bias: true, pack: true, maxRel: 0.03},
		// Q8_K activations: one scale per 256, coarser than Q8_0's (measured 2.6%).
		{name: "q4_k", wt: quant.Q4_K, experts: 4, used: 2, gating: Gating{Func: SoftmaxTopK, K: 2, Norm: true}, maxRel: 0.04},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := moeLayer(t, tc.wt, tc.experts, tc.used, tc.bias, tc.pack)
			if tc.pack && !g.x.Gate[0].Packed() {
				t.Skipf("this CPU has no panel kernels for %v", tc.wt)
			}
			c := moeRuntime(t, g, 64, 2)
			dim := g.h.Dim
			for _, n := range []int{1, 5, 64} {
				setInput(c, n, uint64(n))
				xn := append([]float32(nil), c.S.XN[:n*dim]...)
				l0, r0 := c.ExpertsRead()
				c.MoEFFN(&tc.gating, SiLU, &g.x)
				if l, r := c.ExpertsRead(); l != l0+1 || r <= r0 || r > r0+int64(min(tc.experts, n*tc.used)) {
					t.Errorf("n=%d: experts read %d in %d layers, want 1 layer and 1..%d experts", n, r-r0, l-l0, min(tc.experts, n*tc.used))
				}
				worst := 0.0
				for i := range n {
					want := moeReference(g, &tc.gating, xn[i*dim:(i+1)*dim])
					e := testdata.RelRMS(c.S.Tmp[i*dim:(i+1)*dim], want)
					worst = max(worst, e)
					if e > tc.maxRel {
						t.Errorf("n=%d token %d: relative RMS %.2e > %.0e", n, i, e, tc.maxRel)
					}
				}
				t.Logf("n=%d: worst relative RMS %.2e", n, worst)
			}
		})
	}
}

// BenchmarkMoEFFN is one mixture-of-experts layer (Q8_0 experts, packed where the CPU has
// panels; 8 experts of 192, 2 used, dim 256) for a decode step of 1 token and a prompt
// micro-batch of 64: it must allocate nothing.
func BenchmarkMoEFFN(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(map[int]string{1: "decode", 64: "prompt64"}[n], func(b *testing.B) {
			g := moeLayer(b, quant.Q8_0, 8, 2, false, true)
			c := moeRuntime(b, g, 64, 2)
			gt := Gating{Func: SoftmaxTopK, K: 2, Norm: true}
			setInput(c, n, 1)
			xn := append([]float32(nil), c.S.XN[:n*g.h.Dim]...)
			b.ReportAllocs()
			for b.Loop() {
				copy(c.S.XN, xn)
				c.MoEFFN(&gt, SiLU, &g.x)
			}
		})
	}
}

// TestMoEFFNNoAlloc: the forward pass allocates nothing per token, MoE layers included.
func TestMoEFFNNoAlloc(t *testing.T) {
	g := moeLayer(t, quant.Q8_0, 8, 2, true, true)
	c := moeRuntime(t, g, 16, 2)
	gt := Gating{Func: SoftmaxTopK, K: 2, Norm: true}
	setInput(c, 16, 3)
	if n := testing.AllocsPerRun(20, func() { c.MoEFFN(&gt, SiLU, &g.x) }); n != 0 {
		t.Fatalf("MoEFFN allocates %v times per call", n)
	}
}
