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
	fourLayers := []bool{true, true, false, false}
	cases := []struct {
		name    string
		pattern []bool
		keys    map[string]any      // present, with these values
		tensors map[string][]uint64 // present, with these dims
		absent  []string
	}{
		{"dense", fourLayers, map[string]any{
			"attention.key_length": uint32(128), "attention.key_length_swa": uint32(64),
			"attention.head_count_kv": []uint32{4, 4, 2, 2}, "feed_forward_length": uint32(512),
			"rope.dimension_count": uint32(128), "rope.dimension_count_swa": uint32(64),
		}, map[string][]uint64{
			"rope_freqs.weight":                {64},
			"blk.0.layer_output_scale.weight":  {1},
			"blk.0.attn_q_norm.weight":         {64},
			"blk.0.attn_k.weight":              {256, 256},
			"blk.0.attn_v.weight":              {256, 256},
			"blk.3.attn_q.weight":              {256, 1024},
			"blk.3.attn_k.weight":              {256, 256},
			"blk.3.attn_q_norm.weight":         {128},
			"blk.3.attn_output.weight":         {1024, 256},
			"blk.3.ffn_gate.weight":            {256, 512},
			"blk.3.post_ffw_norm.weight":       {256},
			"blk.2.post_attention_norm.weight": {256},
		}, []string{"blk.0.ffn_gate_inp.weight", "blk.0.ffn_gate_up_exps.weight", "output.weight", "blk.2.attn_v.weight",
			"blk.3.attn_v.weight", "per_layer_token_embd.weight", "blk.0.inp_gate.weight"}},
		{"e", []bool{true, true, false, true, true, false, true, true, false}, map[string]any{
			"attention.shared_kv_layers": uint32(3), "embedding_length_per_layer_input": uint32(256),
			"attention.head_count_kv": []uint32{2, 2, 1, 2, 2, 1, 2, 2, 1},
			"feed_forward_length":     []uint32{256, 256, 256, 256, 256, 256, 512, 512, 512},
		}, map[string][]uint64{
			"per_layer_token_embd.weight": {9 * 256, 320},
			"per_layer_model_proj.weight": {256, 9 * 256},
			"per_layer_proj_norm.weight":  {256},
			"blk.0.ffn_gate.weight":       {256, 256},
			"blk.8.ffn_gate.weight":       {256, 512},
			"blk.8.ffn_down.weight":       {512, 256},
			"blk.8.inp_gate.weight":       {256, 256},
			"blk.8.proj.weight":           {256, 256},
			"blk.8.post_norm.weight":      {256},
			"blk.5.attn_v.weight":         {256, 128},
			"blk.8.attn_k.weight":         {256, 128},
		}, []string{"blk.0.ffn_gate_inp.weight"}},
		{"moe", fourLayers, nil, map[string][]uint64{
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
		}, []string{"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight", "blk.3.attn_v.weight"}},
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
			if !reflect.DeepEqual(pat, tc.pattern) {
				t.Errorf("sliding_window_pattern %v, want %v", pat, tc.pattern)
			}
			for k, want := range tc.keys {
				if got, _ := f.Value("gemma4." + k); !reflect.DeepEqual(got, want) {
					t.Errorf("metadata gemma4.%s = %T %v, want %T %v", k, got, got, want, want)
				}
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
			if ti, _ := f.Tensor("per_layer_model_proj.weight"); ti != nil && ti.Type.String() != "F16" {
				t.Errorf("per_layer_model_proj is %v, want F16 (llama.cpp's quantizer leaves it as converted)", ti.Type)
			}
			if ti, _ := f.Tensor("blk.1.ffn_gate_inp.weight"); ti != nil && ti.Type.String() != "F32" {
				t.Errorf("the router is %v, want F32 (llama.cpp's quantizer leaves it)", ti.Type)
			}
		})
	}
}
