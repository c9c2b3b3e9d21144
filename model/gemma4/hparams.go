package gemma4

import (
	"fmt"

	"ubatch/model"
	"ubatch/ops"
	"ubatch/runner"
)

// refuseUnsupported fails on the Gemma 4 files this package does not run yet, naming the key:
// the runner keeps one head size and one KV head count for every layer, stores every layer's
// KV, and sizes one feed-forward width.
func refuseUnsupported(b *model.Binder) error {
	key := func(k string) string { return b.Arch + "." + k }
	for _, k := range []string{"attention.head_count_kv", "feed_forward_length", "attention.head_count"} {
		if v, ok := b.File.Value(key(k)); ok {
			if _, scalar := b.File.Int(key(k)); !scalar {
				return fmt.Errorf("metadata %s is %T %v: per-layer values are not supported yet (ubatch runs Gemma 4 files with one value for every layer)", key(k), v, v)
			}
		}
	}
	full := b.Int("attention.key_length", -1, 1, 1<<16)
	for _, k := range []string{"attention.key_length_swa", "attention.value_length_swa"} {
		if v := b.Int(k, full, 1, 1<<16); b.Err() == nil && v != full {
			return fmt.Errorf("metadata %s = %d differs from attention.key_length = %d: Gemma 4 files whose sliding and full layers have different head sizes are not supported yet", key(k), v, full)
		}
	}
	if n := b.Int("attention.shared_kv_layers", 0, 0, 1<<12); n > 0 {
		return fmt.Errorf("metadata %s = %d: layers that share an earlier layer's KV (the E2B/E4B models) are not supported yet", key("attention.shared_kv_layers"), n)
	}
	if n := b.Int("embedding_length_per_layer_input", 0, 0, 1<<20); n > 0 {
		return fmt.Errorf("metadata %s = %d: per-layer embeddings (the E2B/E4B models) are not supported yet", key("embedding_length_per_layer_input"), n)
	}
	return b.Err()
}

// slidingLayers reads attention.sliding_window_pattern, one bool per layer (true: the layer
// slides), as Gemma 4's converter writes it from layer_types.
func slidingLayers(b *model.Binder, n int) []bool {
	key := b.Arch + ".attention.sliding_window_pattern"
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
// rope's rope_freqs.weight when some layer is full, rope.scaling.* applied) and the sliding
// layers' (rope.dimension_count_swa, rope.freq_base_swa, unscaled).
func ropes(b *model.Binder, h *runner.Hparams, sliding []bool) (global, local *ops.Rope) {
	dims, base := b.RopeBase(h.HeadDim)
	var factors []float32
	for _, s := range sliding {
		if !s {
			factors = b.Vector("rope_freqs.weight", h.HeadDim/2, false)
			break
		}
	}
	if factors != nil && dims != h.HeadDim {
		b.Fail("metadata %s.rope.dimension_count = %d with rope_freqs: want the head size %d", b.Arch, dims, h.HeadDim)
		return nil, nil
	}
	global = b.Rope(model.RopeOptions{Dims: dims, Base: base, NEOX: true, Scaled: true, Factors: factors})
	local = b.Rope(model.RopeOptions{
		Dims: b.Int("rope.dimension_count_swa", h.HeadDim, 2, h.HeadDim),
		Base: b.Float("rope.freq_base_swa", 10000, 0, 1e12), NEOX: true,
	})
	return global, local
}
