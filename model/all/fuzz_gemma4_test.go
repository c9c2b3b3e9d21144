package all_test

import (
	"testing"

	"ubatch/gguf"
	"ubatch/internal/testmodel"
	"ubatch/synth"
)

// gemma4EFixture is a small Q8_0 Gemma 4 of the e shape (per-layer embeddings, 3 of 9 layers
// sharing KV, per-layer head sizes, KV head counts and FFN widths), dim 64.
func gemma4EFixture(tb testing.TB) *gguf.File {
	tb.Helper()
	a, err := synth.ArchByName("gemma4")
	if err != nil {
		tb.Fatal(err)
	}
	s, err := a.ShapeByName("e")
	if err != nil {
		tb.Fatal(err)
	}
	s.Dim, s.FFN, s.Heads, s.KVHeads, s.HeadDim, s.FullHeadDim, s.PerLayerInput = 64, 64, 4, 2, 32, 64, 32
	v, err := synth.BuiltinVocab(320)
	if err != nil {
		tb.Fatal(err)
	}
	w, err := synth.Build(synth.Options{Arch: "gemma4", Shape: s, FileType: "q8_0", Vocab: v, Seed: 1, Threads: 1})
	if err != nil {
		tb.Fatal(err)
	}
	return testmodel.Parse(tb, w)
}

// FuzzLoadGemma4E is FuzzLoad on the Gemma 4 E-model fixture: its seeds start from the keys and
// tensors the other fixtures lack (head_count_kv and feed_forward_length arrays, key_length_swa,
// shared_kv_layers, embedding_length_per_layer_input, the per-layer embeddings' tensors and a
// shared layer's own K). Each input is up to four mutations; the high bit of the first byte
// skips packing.
func FuzzLoadGemma4E(f *testing.F) {
	base := gemma4EFixture(f)
	key, ten := targets(f, base, "gemma4.")
	seeds := [][]byte{
		nil,
		mutation(opArray, key("attention.head_count_kv"), 2),
		mutation(opUint32, key("attention.head_count_kv"), 3),
		mutation(opUint32, key("attention.head_count_kv"), 1),
		mutation(opArray, key("feed_forward_length"), 64),
		mutation(opUint32, key("feed_forward_length"), 64),
		mutation(opNudge, key("attention.shared_kv_layers"), 1),
		mutation(opNudge, key("attention.shared_kv_layers"), 6),
		mutation(opNudge, key("attention.shared_kv_layers"), -3),
		mutation(opUint32, key("attention.shared_kv_layers"), 1000),
		mutation(opUint32, key("embedding_length_per_layer_input"), 0),
		mutation(opNudge, key("embedding_length_per_layer_input"), 16),
		mutation(opDropKey, key("embedding_length_per_layer_input"), 0),
		mutation(opNudge, key("attention.key_length_swa"), 32),
		mutation(opNudge, key("attention.value_length_swa"), 32),
		mutation(opNudge, key("attention.key_length"), -32),
		mutation(opNudge, key("rope.dimension_count_swa"), 32),
		mutation(opArray, key("attention.sliding_window_pattern"), 1),
		mutation(opDropTensor, ten("per_layer_token_embd.weight"), 0),
		mutation(opDropTensor, ten("blk.8.inp_gate.weight"), 0),
		mutation(opDropTensor, ten("blk.7.attn_k.weight"), 0),
		mutation(opDropTensor, ten("blk.2.attn_k.weight"), 0),
		mutation(opResize, ten("per_layer_model_proj.weight"), 1<<8|2),
		mutation(opResize, ten("per_layer_token_embd.weight"), 0<<8|3),
		mutation(opResize, ten("blk.3.proj.weight"), 0<<8|1),
		mutation(opResize, ten("blk.8.attn_q.weight"), 1<<8|2),
		mutation(opResize, ten("blk.2.attn_k.weight"), 1<<8|2),
		mutation(opRetype, ten("per_layer_token_embd.weight"), 1),
		mutation(opRename, ten("blk.2.post_norm.weight"), 3),
		mutation(opAddDim, ten("per_layer_proj_norm.weight"), 1),
	}
	for _, s := range seeds {
		f.Add(byte(0), s)
		f.Add(byte(0x80), s)
	}
	f.Fuzz(func(t *testing.T, flags byte, muts []byte) {
		loadMutated(t, base, "gemma4", muts, flags&0x80 != 0)
	})
}
