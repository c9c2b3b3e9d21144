package gemma4

import (
	"slices"

	"ubatch/model"
	"ubatch/ops"
	"ubatch/runner"
)

// layerDims are one layer's sizes as llama.cpp reads them for Gemma 4 (llama_hparams' n_head(il),
// n_head_kv(il), n_embd_head_k(il), n_ff(il), is_swa(il) and has_kv(il)).
type layerDims struct {
	Attn    runner.AttnShape
	FFN     int  // the dense feed-forward's width
	Sliding bool // sliding-window attention (attention.sliding_window_pattern)
	// KV is the KV layer the layer attends: its own index, or for a layer past the first
	// block_count - attention.shared_kv_layers, the last KV layer of its kind (sliding or full)
	// before them, whose cells it reads without storing.
	KV     int
	Shared bool
}

// readLayers reads every layer's sizes: head_count, head_count_kv and feed_forward_length as a
// value or an array of one per layer (pl), attention.key_length for the full layers and
// key_length_swa for the sliding ones (each equal to its value_length, as llama.cpp requires),
// and attention.shared_kv_layers. It sets h's KV layers (KVLayers, and KVShapes when the layers'
// shapes differ; NHeads, NKVHeads and HeadDim are then layer 0's).
func readLayers(b *model.Binder, h *runner.Hparams, pl model.PerLayer, sliding []bool) []layerDims {
	key := func(k string) string { return b.Arch + "." + k }
	full := h.HeadDim // attention.key_length, value_length checked equal by HparamsPerLayer
	// Required, as llama.cpp's Gemma 4 loader reads them (its converter always writes them).
	swa := b.Int("attention.key_length_swa", -1, 1, 1<<16)
	if v := b.Int("attention.value_length_swa", -1, 1, 1<<16); b.Err() == nil && v != swa {
		b.Fail("metadata %s = %d differs from %s = %d: Gemma 4 needs equal key and value head sizes", key("attention.value_length_swa"), v, key("attention.key_length_swa"), swa)
	}
	n := h.NLayers
	shared := b.Int("attention.shared_kv_layers", 0, 0, n)
	if b.Err() != nil || sliding == nil {
		return nil
	}
	kvStart := n - shared
	if shared > 0 && kvStart < 2 {
		// llama.cpp's reuse of KV layers asserts two layers of their own before the shared ones.
		b.Fail("metadata %s = %d leaves %d of %s = %d layers with a KV cache of their own: want at least 2", key("attention.shared_kv_layers"), shared, kvStart, key("block_count"), n)
		return nil
	}
	ls := make([]layerDims, n)
	for l := range ls {
		hd := full
		if sliding[l] {
			hd = swa
		}
		ls[l] = layerDims{Attn: runner.AttnShape{NHeads: pl.Heads[l], NKVHeads: pl.KVHeads[l], HeadDim: hd},
			FFN: pl.FFN[l], Sliding: sliding[l], KV: l}
		if l >= kvStart {
			// llama.cpp's layer_reuse_cb: the sliding layers reuse layer kvStart-2, the full ones
			// kvStart-1 (the released models end their KV layers with a sliding then a full one).
			src := kvStart - 1
			if sliding[l] {
				src = kvStart - 2
			}
			ls[l].KV, ls[l].Shared = src, true
		}
	}
	for l := kvStart; l < n; l++ {
		src := ls[ls[l].KV]
		if src.Sliding != ls[l].Sliding || src.Attn != ls[l].Attn {
			b.Fail("metadata %s = %d: layer %d (sliding %v, %+v) would reuse layer %d's KV (sliding %v, %+v), which llama.cpp takes for it: the kinds or shapes differ (%s)",
				key("attention.shared_kv_layers"), shared, l, ls[l].Sliding, ls[l].Attn, ls[l].KV, src.Sliding, src.Attn, key("attention.sliding_window_pattern"))
			return nil
		}
	}
	h.KVLayers = kvStart
	h.NHeads, h.NKVHeads, h.HeadDim = ls[0].Attn.NHeads, ls[0].Attn.NKVHeads, ls[0].Attn.HeadDim
	for l := range kvStart {
		if ls[l].Attn != ls[0].Attn {
			h.KVShapes = make([]runner.AttnShape, kvStart)
			for i := range h.KVShapes {
				h.KVShapes[i] = ls[i].Attn
			}
			break
		}
	}
	return ls
}

// slidingLayers reads attention.sliding_window_pattern, one bool per layer (true: the layer
// slides), as Gemma 4's converter writes it from layer_types.
func slidingLayers(b *model.Binder, n int) []bool {
	key := b.Arch + ".attention.sliding_window_pattern"
	if b.Err() != nil {
		return nil
	}
	v, ok := b.File.Value(key)
	if !ok {
		b.Fail("metadata %s is missing: not a complete %s GGUF", key, b.Arch)
		return nil
	}
	if i, scalar := b.File.Int(key); scalar {
		b.Fail("metadata %s = %d is out of range: Gemma 4 marks each layer, want an array of %d bools", key, i, n)
		return nil
	}
	pat, ok := v.([]bool)
	if !ok || len(pat) != n {
		b.Fail("metadata %s is %T %v, want an array of %d bools (one per layer)", key, v, v, n)
		return nil
	}
	return pat
}

// ropes builds the full layers' rope (rope.dimension_count and rope.freq_base, the proportional
// rope's rope_freqs.weight of half the full head when some layer is full, rope.scaling.*
// applied) and the sliding layers' (rope.dimension_count_swa, default the full layers' count as
// in llama.cpp, and rope.freq_base_swa, unscaled). fullHD and swaHD are the two head sizes.
func ropes(b *model.Binder, sliding []bool, fullHD, swaHD int) (global, local *ops.Rope) {
	dims, base := b.RopeBase(fullHD)
	var factors []float32
	if slices.Contains(sliding, false) {
		factors = b.Vector("rope_freqs.weight", fullHD/2, false)
	}
	if factors != nil && dims != fullHD {
		b.Fail("metadata %s.rope.dimension_count = %d with rope_freqs: want the head size %d", b.Arch, dims, fullHD)
		return nil, nil
	}
	global = b.Rope(model.RopeOptions{Dims: dims, Base: base, NEOX: true, Scaled: true, Factors: factors})
	swaDims := b.Int("rope.dimension_count_swa", dims, 2, 1<<16)
	if b.Err() == nil && swaDims > swaHD {
		b.Fail("metadata %s.rope.dimension_count_swa = %d is past the sliding layers' head size %d", b.Arch, swaDims, swaHD)
		return nil, nil
	}
	local = b.Rope(model.RopeOptions{Dims: swaDims, Base: b.Float("rope.freq_base_swa", 10000, 0, 1e12), NEOX: true})
	return global, local
}

// perLayerInput reads embedding_length_per_layer_input (required, as in llama.cpp; 0: no
// per-layer embeddings) and checks that the per-layer inputs of every token fit an int.
func perLayerInput(b *model.Binder, h *runner.Hparams) int {
	n := b.Int("embedding_length_per_layer_input", -1, 0, 1<<16)
	if b.Err() == nil && n > 0 && h.NLayers*n > 1<<24 {
		b.Fail("metadata %s.embedding_length_per_layer_input = %d over %d layers is too wide", b.Arch, n, h.NLayers)
	}
	return n
}
