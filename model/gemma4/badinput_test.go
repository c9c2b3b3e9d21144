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

// edited rebuilds a mini Gemma 4 of shape (dim 64, F32; 3 layers, the e shape 9) with set's keys
// replacing or adding values and drop's keys and tensors left out.
func edited(t *testing.T, shape string, set map[string]any, drop []string) *gguf.File {
	t.Helper()
	a, _ := synth.ArchByName("gemma4")
	s, err := a.ShapeByName(shape)
	if err != nil {
		t.Fatal(err)
	}
	s.Dim, s.FFN, s.Heads, s.KVHeads, s.HeadDim, s.FullHeadDim = 64, 128, 4, 2, 16, 32
	if s.SharedKV == 0 {
		s.Layers = 3
	}
	if s.PerLayerInput > 0 {
		s.PerLayerInput = 16
	}
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
		{"valid e", "e", nil, nil, ""},
		{"shared layers without their own K", "e", nil, []string{"blk.8.attn_k.weight", "blk.8.attn_k_norm.weight", "blk.7.attn_v.weight"}, ""},
		{"pattern too short", "dense", map[string]any{"gemma4.attention.sliding_window_pattern": []bool{true, false}}, nil,
			"gemma4.attention.sliding_window_pattern is []bool [true false], want an array of 3 bools"},
		{"pattern a number", "dense", map[string]any{"gemma4.attention.sliding_window_pattern": uint32(6)}, nil,
			"gemma4.attention.sliding_window_pattern = 6 is out of range"},
		{"sliding value heads of another size", "dense", map[string]any{"gemma4.attention.value_length_swa": uint32(32)}, nil,
			"gemma4.attention.value_length_swa = 32 differs from gemma4.attention.key_length_swa = 16"},
		{"sliding heads of another size than the tensors", "dense", map[string]any{"gemma4.attention.key_length_swa": uint32(32), "gemma4.attention.value_length_swa": uint32(32)}, nil,
			`tensor "blk.0.attn_q.weight" has shape [64 64], want [64 128]`},
		{"KV heads per layer, too few", "dense", map[string]any{"gemma4.attention.head_count_kv": []uint32{2, 2}}, nil,
			"gemma4.attention.head_count_kv has 2 values, want 3 (one per layer, gemma4.block_count)"},
		{"KV heads per layer, too many", "dense", map[string]any{"gemma4.attention.head_count_kv": []uint32{2, 2, 1, 1}}, nil,
			"gemma4.attention.head_count_kv has 4 values, want 3"},
		{"KV heads per layer, not dividing", "dense", map[string]any{"gemma4.attention.head_count_kv": []uint32{2, 3, 1}}, nil,
			"gemma4.attention.head_count_kv = 3 (layer 1) does not divide"},
		{"KV heads per layer, out of range", "dense", map[string]any{"gemma4.attention.head_count_kv": []uint32{2, 0, 1}}, nil,
			"gemma4.attention.head_count_kv[1] = 0 is out of range"},
		{"KV heads per layer, strings", "dense", map[string]any{"gemma4.attention.head_count_kv": []string{"2", "2", "1"}}, nil,
			"gemma4.attention.head_count_kv is []string [2 2 1], want an integer or an array of 3 integers"},
		{"KV heads per layer against the tensors", "dense", map[string]any{"gemma4.attention.head_count_kv": []uint32{2, 2, 1}}, nil,
			`tensor "blk.2.attn_k.weight" has shape [64 64], want [64 32]`},
		{"FFN widths per layer, wrong length", "e", map[string]any{"gemma4.feed_forward_length": []uint32{128, 128, 256}}, nil,
			"gemma4.feed_forward_length has 3 values, want 9"},
		{"FFN widths per layer against the tensors", "e", map[string]any{"gemma4.feed_forward_length": uint32(128)}, nil,
			`tensor "blk.6.ffn_gate.weight" has shape [64 256], want [64 128]`},
		{"shared KV layers past the count", "dense", map[string]any{"gemma4.attention.shared_kv_layers": uint32(4)}, nil,
			"gemma4.attention.shared_kv_layers = 4 is out of range [0, 3]"},
		{"shared KV layers leaving one", "e", map[string]any{"gemma4.attention.shared_kv_layers": uint32(8)}, nil,
			"gemma4.attention.shared_kv_layers = 8 leaves 1 of gemma4.block_count = 9 layers"},
		{"shared KV layers of another kind", "dense", map[string]any{"gemma4.attention.shared_kv_layers": uint32(1)}, nil,
			"gemma4.attention.shared_kv_layers = 1: layer 2 (sliding false"},
		{"shared KV layers a string", "e", map[string]any{"gemma4.attention.shared_kv_layers": "3"}, nil,
			"gemma4.attention.shared_kv_layers is string 3, want an integer"},
		{"per-layer embeddings without their tensors", "dense", map[string]any{"gemma4.embedding_length_per_layer_input": uint32(8)}, nil,
			`tensor "per_layer_token_embd.weight" is missing`},
		{"per-layer embeddings of another width", "e", map[string]any{"gemma4.embedding_length_per_layer_input": uint32(8)}, nil,
			`tensor "per_layer_token_embd.weight" has shape [144 320], want [72 320]`},
		{"per-layer embeddings without a layer's gate", "e", nil, []string{"blk.4.inp_gate.weight"}, `tensor "blk.4.inp_gate.weight" is missing`},
		{"per-layer embeddings without their norm", "e", nil, []string{"per_layer_proj_norm.weight"}, `tensor "per_layer_proj_norm.weight" is missing`},
		{"per-layer embeddings without the key", "e", nil, []string{"gemma4.embedding_length_per_layer_input"}, "gemma4.embedding_length_per_layer_input is missing"},
		{"sliding head size missing", "dense", nil, []string{"gemma4.attention.key_length_swa"}, "gemma4.attention.key_length_swa is missing"},
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
