package synth

import "fmt"

// gemma4FullRotary is the share of a full-attention head Gemma 4's proportional rope rotates
// (partial_rotary_factor 0.25); its sliding layers rotate the whole head.
const gemma4FullRotary = 0.25

// gemma4Shapes are the kinds of Gemma 4 synth writes, each small: dense (the 31B's layout) and
// moe (the 26B-A4B's: a dense FFN beside 8 experts of which 2 are used).
var gemma4Shapes = []Shape{
	{Name: "dense", Dim: 256, Layers: 4, Heads: 8, KVHeads: 2, HeadDim: 64, FFN: 512, Ctx: 4096, RopeBase: 1e6, Eps: 1e-6},
	{Name: "moe", Dim: 256, Layers: 4, Heads: 8, KVHeads: 2, HeadDim: 64, FFN: 256, Ctx: 4096, RopeBase: 1e6, Eps: 1e-6,
		Experts: 8, ExpertsUsed: 2, ExpertFFN: 128},
}

// gemma4Sliding is the layer_types synth writes for layer i of n: every third layer (2, 5, ...)
// and the last have full attention, the others slide (the released models' last layer is full
// too), as Gemma 4's files mark them in sliding_window_pattern.
func gemma4Sliding(i, n int) bool { return i%3 != 2 && i != n-1 }

// proportionalRopeFactors are the rope_freqs.weight Gemma 4's converter writes for the full
// layers: 1 for the first dims/2·share pairs, 1e30 (no rotation) for the rest.
func proportionalRopeFactors(dims int, share float64) []float32 {
	out := make([]float32, dims/2)
	rot := int(float64(dims) * share / 2)
	for i := range out {
		out[i] = 1
		if i >= rot {
			out[i] = 1e30
		}
	}
	return out
}

// setGemma4 writes the keys Gemma 4's converter adds to Gemma 3's: the sliding layers as a bool
// array, the _swa head and rope lengths (equal to the full layers' here), no shared KV layers
// and no per-layer embeddings.
func (l *layout) setGemma4(set func(string, any)) {
	k := func(key string) string { return l.GGUF + "." + key }
	swa := make([]bool, l.s.Layers)
	for i := range swa {
		swa[i] = gemma4Sliding(i, l.s.Layers)
	}
	set(k("attention.sliding_window_pattern"), swa)
	set(k("attention.shared_kv_layers"), uint32(0))
	set(k("embedding_length_per_layer_input"), uint32(0))
	set(k("attention.key_length_swa"), uint32(l.headDim))
	set(k("attention.value_length_swa"), uint32(l.headDim))
	set(k("rope.dimension_count_swa"), uint32(l.ropeDims))
}

// gemma4Block lists layer i's tensors in the order llama.cpp's loader creates them: attention,
// its norms and the layer's output scale, the dense FFN, then (MoE) the router, its scale, the
// experts' norms, the fused gate+up and down experts and the experts' output scales.
//
// Gemma 4 does not scale attention scores: with Q/K norm weights of 1, scores of normed heads of
// 64 would have std 8 and every softmax be nearly one-hot, so that llama.cpp's own Q8_0 lands
// 50% from its F32. Norm weights of 0.5 give scores of std 2.
func (l *layout) gemma4Block(i int) []tensorSpec {
	s, p := l.s, fmt.Sprintf("blk.%d.", i)
	w := func(name, role string, cols, rows, qk int) tensorSpec {
		return tensorSpec{name: p + name, role: role, layer: i, kind: kindWeight, cols: cols, rows: rows, qkRows: qk}
	}
	vec := func(name string, kind, n int) tensorSpec {
		return tensorSpec{name: p + name, role: "norm", kind: kind, cols: n}
	}
	ts := []tensorSpec{
		vec("attn_norm.weight", kindNorm, s.Dim),
		w("attn_q.weight", "attn_q", s.Dim, l.qDim, l.qDim),
		w("attn_k.weight", "attn_k", s.Dim, l.kvDim, l.kvDim),
		w("attn_v.weight", "attn_v", s.Dim, l.kvDim, 0),
		w("attn_output.weight", "attn_output", l.qDim, s.Dim, 0),
		vec("attn_q_norm.weight", kindQKNorm, l.headDim), vec("attn_k_norm.weight", kindQKNorm, l.headDim),
		vec("post_attention_norm.weight", kindNorm, s.Dim),
		vec("layer_output_scale.weight", kindLayerScale, 1),
		vec("ffn_norm.weight", kindNorm, s.Dim),
		w("ffn_gate.weight", "ffn_gate", s.Dim, s.FFN, 0), w("ffn_up.weight", "ffn_up", s.Dim, s.FFN, 0),
		w("ffn_down.weight", "ffn_down", s.FFN, s.Dim, 0),
		vec("post_ffw_norm.weight", kindNorm, s.Dim),
	}
	if !l.MoE {
		return ts
	}
	router := w("ffn_gate_inp.weight", "router", s.Dim, l.experts, 0)
	router.kind = kindRouter
	exps := func(name, role string, cols, rows int) tensorSpec {
		t := w(name, role, cols, rows, 0)
		t.experts = l.experts
		return t
	}
	return append(ts, router, vec("ffn_gate_inp.scale", kindNorm, s.Dim),
		vec("pre_ffw_norm_2.weight", kindNorm, s.Dim), vec("post_ffw_norm_1.weight", kindNorm, s.Dim),
		vec("post_ffw_norm_2.weight", kindNorm, s.Dim),
		exps("ffn_gate_up_exps.weight", "ffn_gate", s.Dim, 2*l.expFFN),
		exps("ffn_down_exps.weight", "ffn_down", l.expFFN, s.Dim),
		vec("ffn_down_exps.scale", kindNorm, l.experts))
}
