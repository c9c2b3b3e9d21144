package gemma4_test

import (
	"slices"
	"strings"
	"testing"

	"ubatch/gguf"
	"ubatch/internal/testmodel"
	"ubatch/model"
	"ubatch/synth"
)

// edited rebuilds a mini Gemma 4 of shape (3 layers, dim 64, F32) with set's keys replacing or
// adding values and drop's keys and tensors left out.
func edited(t *testing.T, shape string, set map[string]any, drop []string) *gguf.File {
	t.Helper()
	a, _ := synth.ArchByName("gemma4")
	s, err := a.ShapeByName(shape)
	if err != nil {
		t.Fatal(err)
	}
	s.Dim, s.Layers, s.FFN, s.Heads, s.KVHeads, s.HeadDim = 64, 3, 128, 4, 2, 16
	v, err := synth.BuiltinVocab(320)
	if err != nil {
		t.Fatal(err)
	}
	w, err := synth.Build(synth.Options{Arch: "gemma4", Shape: s, FileType: "f32", Vocab: v, Seed: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	base := testmodel.Parse(t, w)
	out := gguf.NewWriter()
	if err := out.SetFrom(base, func(k string) bool { return !slices.Contains(drop, k) }); err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		if err := out.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, ti := range base.Tensors {
		if !slices.Contains(drop, ti.Name) {
			if err := out.AddTensor(ti.Name, ti.Type, ti.Dims, ti.Data); err != nil {
				t.Fatal(err)
			}
		}
	}
	return testmodel.Parse(t, out)
}

// TestBadFilesFail checks that Gemma 4 files this package cannot run, or whose metadata and
// tensors disagree, are load errors naming the key or tensor, never a panic.
func TestBadFilesFail(t *testing.T) {
	cases := []struct {
		name, shape string
		set         map[string]any
		drop        []string
		want        string
	}{
		{"valid dense", "dense", nil, nil, ""},
		{"valid moe", "moe", nil, nil, ""},
		{"pattern too short", "dense", map[string]any{"gemma4.attention.sliding_window_pattern": []bool{true, false}}, nil,
			"gemma4.attention.sliding_window_pattern is []bool [true false], want an array of 3 bools"},
		{"pattern a number", "dense", map[string]any{"gemma4.attention.sliding_window_pattern": uint32(6)}, nil,
			"gemma4.attention.sliding_window_pattern = 6 is out of range"},
		{"sliding heads of another size", "dense", map[string]any{"gemma4.attention.key_length_swa": uint32(32)}, nil,
			"key_length_swa = 32 differs from attention.key_length = 16"},
		{"KV heads per layer", "dense", map[string]any{"gemma4.attention.head_count_kv": []uint32{2, 2, 4}}, nil,
			"gemma4.attention.head_count_kv is []uint32 [2 2 4]: per-layer values are not supported yet"},
		{"FFN widths per layer", "dense", map[string]any{"gemma4.feed_forward_length": []uint32{128, 128, 256}}, nil,
			"gemma4.feed_forward_length is []uint32"},
		{"shared KV layers", "dense", map[string]any{"gemma4.attention.shared_kv_layers": uint32(1)}, nil,
			"layers that share an earlier layer's KV (the E2B/E4B models) are not supported yet"},
		{"per-layer embeddings", "dense", map[string]any{"gemma4.embedding_length_per_layer_input": uint32(8)}, nil,
			"per-layer embeddings (the E2B/E4B models) are not supported yet"},
		{"rope_freqs missing", "dense", nil, []string{"rope_freqs.weight"}, `tensor "rope_freqs.weight" is missing`},
		{"window missing", "dense", nil, []string{"gemma4.attention.sliding_window"}, "gemma4.attention.sliding_window is missing"},
		{"router without expert_count", "moe", nil, []string{"gemma4.expert_count"}, "is in a file without gemma4.expert_count"},
		{"router scale missing", "moe", nil, []string{"blk.1.ffn_gate_inp.scale"}, `tensor "blk.1.ffn_gate_inp.scale" is missing`},
		{"experts' norm missing", "moe", nil, []string{"blk.0.post_ffw_norm_2.weight"}, `tensor "blk.0.post_ffw_norm_2.weight" is missing`},
		{"more experts than stacked", "moe", map[string]any{"gemma4.expert_count": uint32(16)}, nil, `tensor "blk.0.ffn_gate_inp.weight" has shape`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := edited(t, tc.shape, tc.set, tc.drop)
			m, err := model.Load(f, model.LoadOptions{NoPack: true})
			switch {
			case tc.want == "":
				if err != nil {
					t.Fatalf("the valid file does not load: %v", err)
				}
				m.Close()
			case err == nil:
				m.Close()
				t.Fatal("loaded without an error")
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not contain %q", err, tc.want)
			default:
				t.Log(err)
			}
		})
	}
}
