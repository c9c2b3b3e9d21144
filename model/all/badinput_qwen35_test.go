package all_test

import "testing"

// TestBadQwen35Fails makes inconsistent variants of the shared qwen35 file (synth has no qwen35
// fixture yet): the delta nets' sizes (ssm.*) must agree with each other and with their tensors,
// the attention interval must leave an attention layer, and the rope sections must fit.
func TestBadQwen35Fails(t *testing.T) {
	expectSharedFails(t, "models/arch/synth-qwen35-f16.gguf", []sharedCase{
		{"inner_size not heads of state_size", func(v *variant) { v.set("qwen35.ssm.inner_size", uint32(256)) },
			"qwen35.ssm.inner_size = 256 is not ssm.time_step_rank (4) value heads of ssm.state_size (32)"},
		{"state_size contradicts inner_size", func(v *variant) { v.set("qwen35.ssm.state_size", uint32(64)) },
			"qwen35.ssm.inner_size = 128 is not"},
		{"group_count does not divide time_step_rank", func(v *variant) { v.set("qwen35.ssm.group_count", uint32(3)) },
			"qwen35.ssm.group_count = 3 does not divide ssm.time_step_rank = 4"},
		{"group_count contradicts attn_qkv", func(v *variant) { v.set("qwen35.ssm.group_count", uint32(4)) },
			`tensor "blk.0.attn_qkv.weight" has shape [256 256], want [256 384]`},
		{"time_step_rank contradicts ssm_a", func(v *variant) {
			v.set("qwen35.ssm.time_step_rank", uint32(8))
			v.set("qwen35.ssm.inner_size", uint32(256))
		}, `tensor "blk.0.attn_qkv.weight" has shape`},
		{"conv_kernel contradicts ssm_conv1d", func(v *variant) { v.set("qwen35.ssm.conv_kernel", uint32(5)) },
			`tensor "blk.0.ssm_conv1d.weight" has shape [4 256], want [5 256]`},
		{"conv_kernel missing", func(v *variant) { v.set("qwen35.ssm.conv_kernel", nil) },
			"qwen35.ssm.conv_kernel is missing"},
		{"conv_kernel one tap", func(v *variant) { v.set("qwen35.ssm.conv_kernel", uint32(1)) },
			"qwen35.ssm.conv_kernel = 1 is out of range"},
		{"ssm_a of the wrong length", func(v *variant) { v.tensor("blk.1.ssm_a").Dims[0] = 2 },
			`tensor "blk.1.ssm_a" has shape [2], want [4]`},
		{"ssm_dt missing", func(v *variant) { v.dropTensor("blk.2.ssm_dt.bias") },
			`tensor "blk.2.ssm_dt.bias" is missing`},
		{"ssm_norm of the wrong length", func(v *variant) { v.tensor("blk.0.ssm_norm.weight").Dims[0] = 64 },
			`tensor "blk.0.ssm_norm.weight" has shape [64], want [32]`},
		{"attn_gate missing", func(v *variant) { v.dropTensor("blk.1.attn_gate.weight") },
			`tensor "blk.1.attn_gate.weight" is missing`},
		{"attn_q without its gate half", func(v *variant) { v.tensor("blk.3.attn_q.weight").Dims[1] = 256 },
			`tensor "blk.3.attn_q.weight" has shape [256 256], want [256 512]`},
		{"post_attention_norm missing", func(v *variant) { v.dropTensor("blk.3.post_attention_norm.weight") },
			`tensor "blk.3.post_attention_norm.weight" is missing`},
		{"interval past the layers", func(v *variant) { v.set("qwen35.full_attention_interval", uint32(5)) },
			"qwen35.full_attention_interval = 5 is out of range [1, 4]"},
		{"interval 2 wants attention in layer 1", func(v *variant) { v.set("qwen35.full_attention_interval", uint32(2)) },
			`tensor "blk.1.attn_q.weight" is missing`},
		{"nextn layers leave no attention", func(v *variant) { v.set("qwen35.nextn_predict_layers", uint32(1)) },
			"qwen35.full_attention_interval = 4 is out of range [1, 3]"},
		{"nextn layers all the layers", func(v *variant) { v.set("qwen35.nextn_predict_layers", uint32(4)) },
			"qwen35.nextn_predict_layers = 4 is out of range [0, 3]"},
		{"recurrent_layers array", func(v *variant) { v.set("qwen35.attention.recurrent_layers", []int32{1, 1, 1, 0}) },
			"attention.recurrent_layers is not supported yet"},
		{"rope sections too many pairs", func(v *variant) { v.set("qwen35.rope.dimension_sections", []int32{3, 3, 2, 9}) },
			"qwen35.rope.dimension_sections = [3 3 2 9]: want four non-negative counts"},
		{"rope sections negative", func(v *variant) { v.set("qwen35.rope.dimension_sections", []int32{3, -3, 2, 0}) },
			"want four non-negative counts"},
		{"rope sections three", func(v *variant) { v.set("qwen35.rope.dimension_sections", []int32{3, 3, 2}) },
			"want four non-negative counts"},
	})
}
