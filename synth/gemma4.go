package synth

import "fmt"

// gemma4FullRotary is the share of a full-attention head Gemma 4's proportional rope rotates
// (partial_rotary_factor 0.25); its sliding layers rotate the whole head.
const gemma4FullRotary = 0.25

// gemma4Shapes are the kinds of Gemma 4 synth writes, each small, with the released files'
// per-layer sizes: full layers of heads twice as wide and fewer KV heads than the sliding ones
// (the 31B's 512 and 256 wide, 4 and 16 KV heads; here 2 and 4, moe 1 and 4), and no attn_v
// (their values are their keys):
//   - dense, the 31B's layout;
//   - moe, the 26B-A4B's: a dense FFN beside 8 experts of which 2 are used;
//   - e, the E2B/E4B's: per-layer embeddings, the last 3 of 9 layers reusing the KV of the last
//     sliding and full layers before them, their FFN twice as wide; half the KV heads on the full
//     layers, attn_v on every layer.
var gemma4Shapes = []Shape{
	{Name: "dense", Dim: 256, Layers: 4, Heads: 8, KVHeads: 4, HeadDim: 64, FFN: 512, Ctx: 4096, RopeBase: 1e6, Eps: 1e-6,
		FullHeadDim: 128, FullKVHeads: 2, FullKEqV: true},
	{Name: "moe", Dim: 256, Layers: 4, Heads: 8, KVHeads: 4, HeadDim: 64, FFN: 256, Ctx: 4096, RopeBase: 1e6, Eps: 1e-6,
		Experts: 8, ExpertsUsed: 2, ExpertFFN: 128, FullHeadDim: 128, FullKVHeads: 1, FullKEqV: true},
	{Name: "e", Dim: 256, Layers: 9, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 256, Ctx: 4096, RopeBase: 1e6, Eps: 1e-6,
		FullHeadDim: 128, FullKVHeads: 1, SharedKV: 3, PerLayerInput: 256, DoubleWideFFN: true},
}

// gemma4Sliding is the layer_types synth writes for layer i of n: every third layer (2, 5, ...)
// and the last have full attention, the others slide (the released models' last layer is full
// too), as Gemma 4's files mark them in sliding_window_pattern.
func gemma4Sliding(i, n int) bool { return i%3 != 2 && i != n-1 }

// gemma4Attn is layer i's head size, KV head count and whether it has attn_v, as the converter
// derives them from head_dim/global_head_dim, num_key_value_heads/num_global_key_value_heads and
// attention_k_eq_v.
func (l *layout) gemma4Attn(i int) (hd, kvHeads int, hasV bool) {
	if gemma4Sliding(i, l.s.Layers) {
		return l.headDim, l.s.KVHeads, true
	}
	return l.gemma4FullHD(), l.gemma4FullKV(), !l.s.FullKEqV
}

func (l *layout) gemma4FullHD() int {
	if l.s.FullHeadDim > 0 {
		return l.s.FullHeadDim
	}
	return l.headDim
}

func (l *layout) gemma4FullKV() int {
	if l.s.FullKVHeads > 0 {
		return l.s.FullKVHeads
	}
	return l.s.KVHeads
}

// gemma4FFN is layer i's dense FFN width: twice FFN on the shared KV layers with
// use_double_wide_mlp.
func (l *layout) gemma4FFN(i int) int {
	if l.s.DoubleWideFFN && i >= l.s.Layers-l.s.SharedKV {
		return 2 * l.s.FFN
	}
	return l.s.FFN
}

// checkGemma4 refuses the shapes whose files llama.cpp would misread: a head size it cannot
// rotate, or shared layers whose kind the layer llama.cpp reuses for them does not have.
func (l *layout) checkGemma4() error {
	s := l.s
	if hd := l.gemma4FullHD(); hd%2 != 0 || s.Heads%l.gemma4FullKV() != 0 {
		return fmt.Errorf("shape %s: full layers of %d heads over %d KV heads of %d", s.Name, s.Heads, l.gemma4FullKV(), hd)
	}
	if s.SharedKV == 0 {
		return nil
	}
	kvStart := s.Layers - s.SharedKV
	if kvStart < 2 || gemma4Sliding(kvStart-1, s.Layers) || !gemma4Sliding(kvStart-2, s.Layers) {
		return fmt.Errorf("shape %s: %d shared KV layers of %d: llama.cpp reuses layers %d (sliding) and %d (full)", s.Name, s.SharedKV, s.Layers, kvStart-2, kvStart-1)
	}
	return nil
}

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

// setGemma4 writes the keys Gemma 4's converter adds to Gemma 3's, replacing some: the sliding
// layers as a bool array, the full layers' head size as key_length and the sliding ones' as
// key_length_swa, the KV head counts as an array when the full layers' differ, the FFN widths as
// an array with use_double_wide_mlp, the full and sliding rope lengths, the shared KV layers
// and the per-layer embeddings' width.
func (l *layout) setGemma4(set func(string, any)) {
	k := func(key string) string { return l.GGUF + "." + key }
	n := l.s.Layers
	swa := make([]bool, n)
	for i := range swa {
		swa[i] = gemma4Sliding(i, n)
	}
	set(k("attention.shared_kv_layers"), uint32(l.s.SharedKV))
	set(k("embedding_length_per_layer_input"), uint32(l.s.PerLayerInput))
	set(k("attention.sliding_window_pattern"), swa)
	full := uint32(l.gemma4FullHD())
	set(k("attention.key_length"), full)
	set(k("attention.value_length"), full)
	set(k("attention.key_length_swa"), uint32(l.headDim))
	set(k("attention.value_length_swa"), uint32(l.headDim))
	if l.s.DoubleWideFFN {
		ffn := make([]uint32, n)
		for i := range ffn {
			ffn[i] = uint32(l.gemma4FFN(i))
		}
		set(k("feed_forward_length"), ffn)
	}
	if l.s.FullKVHeads > 0 {
		kv := make([]uint32, n)
		for i := range kv {
			_, h, _ := l.gemma4Attn(i)
			kv[i] = uint32(h)
		}
		set(k("attention.head_count_kv"), kv)
	}
	set(k("rope.dimension_count"), full)
	set(k("rope.dimension_count_swa"), uint32(l.headDim))
}

// gemma4Globals are the per-layer embeddings' tensors outside the blocks (none without them):
// the token table of NLayers·PerLayerInput values a token, the projection of the embedding to
// the same width and its norm.
func (l *layout) gemma4Globals() []tensorSpec {
	n := l.s.PerLayerInput
	if n == 0 {
		return nil
	}
	w := l.s.Layers * n
	return []tensorSpec{
		{name: "per_layer_token_embd.weight", role: "per_layer_token_embd", kind: kindWeight, cols: w, rows: -1},
		{name: "per_layer_model_proj.weight", role: "per_layer_model_proj", kind: kindWeight, cols: l.s.Dim, rows: w},
		{name: "per_layer_proj_norm.weight", role: "norm", kind: kindNorm, cols: n},
	}
}

// gemma4Block lists layer i's tensors in the order llama.cpp's loader creates them: attention
// (attn_v where the layer has it), its norms and the layer's output scale, the dense FFN, then
// (MoE) the router, its scale, the experts' norms, the fused gate+up and down experts and the
// experts' output scales, then the per-layer embedding's gate, projection and norm.
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
	hd, kvHeads, hasV := l.gemma4Attn(i)
	qDim, kvDim, ffn := s.Heads*hd, kvHeads*hd, l.gemma4FFN(i)
	ts := []tensorSpec{
		vec("attn_norm.weight", kindNorm, s.Dim),
		w("attn_q.weight", "attn_q", s.Dim, qDim, qDim),
		w("attn_k.weight", "attn_k", s.Dim, kvDim, kvDim),
	}
	if hasV {
		ts = append(ts, w("attn_v.weight", "attn_v", s.Dim, kvDim, 0))
	}
	ts = append(ts,
		w("attn_output.weight", "attn_output", qDim, s.Dim, 0),
		vec("attn_q_norm.weight", kindQKNorm, hd), vec("attn_k_norm.weight", kindQKNorm, hd),
		vec("post_attention_norm.weight", kindNorm, s.Dim),
		vec("layer_output_scale.weight", kindLayerScale, 1),
		vec("ffn_norm.weight", kindNorm, s.Dim),
		w("ffn_gate.weight", "ffn_gate", s.Dim, ffn, 0), w("ffn_up.weight", "ffn_up", s.Dim, ffn, 0),
		w("ffn_down.weight", "ffn_down", ffn, s.Dim, 0),
		vec("post_ffw_norm.weight", kindNorm, s.Dim))
	if l.MoE {
		router := w("ffn_gate_inp.weight", "router", s.Dim, l.experts, 0)
		router.kind = kindRouter
		exps := func(name, role string, cols, rows int) tensorSpec {
			t := w(name, role, cols, rows, 0)
			t.experts = l.experts
			return t
		}
		ts = append(ts, router, vec("ffn_gate_inp.scale", kindNorm, s.Dim),
			vec("pre_ffw_norm_2.weight", kindNorm, s.Dim), vec("post_ffw_norm_1.weight", kindNorm, s.Dim),
			vec("post_ffw_norm_2.weight", kindNorm, s.Dim),
			exps("ffn_gate_up_exps.weight", "ffn_gate", s.Dim, 2*l.expFFN),
			exps("ffn_down_exps.weight", "ffn_down", l.expFFN, s.Dim),
			vec("ffn_down_exps.scale", kindNorm, l.experts))
	}
	if n := s.PerLayerInput; n > 0 {
		ts = append(ts, w("inp_gate.weight", "inp_gate", s.Dim, n, 0), w("proj.weight", "proj", n, s.Dim, 0),
			vec("post_norm.weight", kindNorm, s.Dim))
	}
	return ts
}
