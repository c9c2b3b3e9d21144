package synth_test

import (
	"reflect"
	"testing"

	"ubatch/internal/testmodel"
	"ubatch/synth"
)

// TestGemma4Layout checks the keys and tensors llama.cpp's Gemma 4 loader reads (src/models/
// gemma4.cpp; it refused none of the files of model/gemma4/testdata) for each kind: their
// presence, types and shapes where they differ from Gemma 3's, and the absence of the other
// kind's tensors.
func TestGemma4Layout(t *testing.T) {
	cases := []struct {
		name    string
		tensors map[string][]uint64 // present, with these dims
		absent  []string
	}{
		{"dense", map[string][]uint64{
			"rope_freqs.weight":                {32},
			"blk.0.layer_output_scale.weight":  {1},
			"blk.3.attn_q_norm.weight":         {64},
			"blk.3.ffn_gate.weight":            {256, 512},
			"blk.3.post_ffw_norm.weight":       {256},
			"blk.2.post_attention_norm.weight": {256},
		}, []string{"blk.0.ffn_gate_inp.weight", "blk.0.ffn_gate_up_exps.weight", "output.weight"}},
		{"moe", map[string][]uint64{
			"blk.1.ffn_gate.weight":           {256, 256},
			"blk.1.ffn_gate_inp.weight":       {256, 8},
			"blk.1.ffn_gate_inp.scale":        {256},
			"blk.1.ffn_gate_up_exps.weight":   {256, 256, 8},
			"blk.1.ffn_down_exps.weight":      {128, 256, 8},
			"blk.1.ffn_down_exps.scale":       {8},
			"blk.1.pre_ffw_norm_2.weight":     {256},
			"blk.1.post_ffw_norm_1.weight":    {256},
			"blk.1.post_ffw_norm_2.weight":    {256},
			"blk.1.layer_output_scale.weight": {1},
		}, []string{"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight"}},
	}
	a, err := synth.ArchByName("gemma4")
	if err != nil {
		t.Fatal(err)
	}
	vocab, err := synth.BuiltinVocab(320)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := a.ShapeByName(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			w, err := synth.Build(synth.Options{Arch: "gemma4", Shape: s, FileType: "q8_0", Vocab: vocab, Seed: 1, Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			f := testmodel.Parse(t, w)
			pat, _ := f.Value("gemma4.attention.sliding_window_pattern")
			if want := []bool{true, true, false, false}; !reflect.DeepEqual(pat, want) {
				t.Errorf("sliding_window_pattern %v, want %v", pat, want)
			}
			for _, k := range []string{"attention.key_length_swa", "attention.value_length_swa", "rope.dimension_count_swa",
				"rope.freq_base_swa", "attention.shared_kv_layers", "embedding_length_per_layer_input", "final_logit_softcapping"} {
				if _, ok := f.Value("gemma4." + k); !ok {
					t.Errorf("metadata gemma4.%s is missing", k)
				}
			}
			for name, dims := range tc.tensors {
				ti, ok := f.Tensor(name)
				if !ok {
					t.Errorf("tensor %s is missing", name)
				} else if !reflect.DeepEqual(ti.Dims, dims) {
					t.Errorf("tensor %s has dims %v, want %v", name, ti.Dims, dims)
				}
			}
			for _, name := range tc.absent {
				if _, ok := f.Tensor(name); ok {
					t.Errorf("tensor %s should not be written", name)
				}
			}
			if ti, _ := f.Tensor("blk.1.ffn_gate_inp.weight"); ti != nil && ti.Type.String() != "F32" {
				t.Errorf("the router is %v, want F32 (llama.cpp's quantizer leaves it)", ti.Type)
			}
		})
	}
}
