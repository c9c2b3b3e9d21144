package all_test

import (
	"testing"

	"ubatch/gguf"
	"ubatch/internal/testdata"
)

// FuzzLoadQwen35 is FuzzLoad on the shared qwen35 file (synth has no qwen35 fixture yet): its
// seeds start from the sizes of the delta nets (ssm.*), the attention interval, the MTP layer
// count, the rope sections and the delta nets' own tensors. Each input is up to four mutations;
// the high bit of the first byte skips packing.
func FuzzLoadQwen35(f *testing.F) {
	base, err := gguf.Parse(testdata.ReadFile(f, "models/arch/synth-qwen35-f16.gguf"))
	if err != nil {
		f.Fatal(err)
	}
	key, ten := targets(f, base, "qwen35.")
	seeds := [][]byte{
		nil,
		mutation(opUint32, key("ssm.inner_size"), 256),
		mutation(opNudge, key("ssm.state_size"), 32),
		mutation(opUint32, key("ssm.group_count"), 3),
		mutation(opUint32, key("ssm.group_count"), 4),
		mutation(opUint32, key("ssm.time_step_rank"), 0),
		mutation(opNudge, key("ssm.conv_kernel"), 1),
		mutation(opUint32, key("ssm.conv_kernel"), 1),
		mutation(opDropKey, key("ssm.conv_kernel"), 0),
		mutation(opUint32, key("full_attention_interval"), 2),
		mutation(opUint32, key("full_attention_interval"), 0),
		mutation(opAddKey, 15, 1<<1), // full_attention_interval 1: every layer attention
		mutation(opAddKey, 16, 1<<1), // nextn_predict_layers 1
		mutation(opArray, key("rope.dimension_sections"), 9),
		mutation(opNudge, key("rope.dimension_count"), 48),
		mutation(opResize, ten("blk.0.ssm_conv1d.weight"), 0<<8|5),
		mutation(opResize, ten("blk.1.ssm_conv1d.weight"), 1<<8|3),
		mutation(opResize, ten("blk.0.ssm_a"), 2),
		mutation(opRetype, ten("blk.2.ssm_a"), 1),
		mutation(opResize, ten("blk.1.attn_qkv.weight"), 1<<8|2),
		mutation(opResize, ten("blk.3.attn_q.weight"), 1<<8|2),
		mutation(opDropTensor, ten("blk.2.ssm_norm.weight"), 0),
		mutation(opRename, ten("blk.0.ssm_out.weight"), 3),
		mutation(opRetype, ten("blk.1.ssm_alpha.weight"), 2),
		mutation(opAddDim, ten("blk.0.ssm_dt.bias"), 1),
	}
	for _, s := range seeds {
		f.Add(byte(0), s)
		f.Add(byte(0x80), s)
	}
	f.Fuzz(func(t *testing.T, flags byte, muts []byte) {
		loadMutated(t, base, "qwen35", muts, flags&0x80 != 0)
	})
}
