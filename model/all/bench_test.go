package all_test

import (
	"testing"

	"ubatch/batch"
	"ubatch/quant"
	"ubatch/runner"
)

// decodeModels are one model per family, for the decode benchmark and the allocation test.
var decodeModels = []struct{ name, file string }{
	{"stories", "stories260K.gguf"},
	{"llama3", "arch/synth-llama3-q8_0.gguf"},
	{"qwen2", "arch/synth-qwen2-q8_0.gguf"},
	{"qwen3", "arch/synth-qwen3-q8_0.gguf"},
	{"gemma2", "arch/synth-gemma2-q8_0.gguf"},
	{"gemma3", "arch/synth-gemma3-q8_0.gguf"},
	{"phi3", "arch/synth-phi3-q8_0.gguf"},
	{"qwen3moe", "arch/synth-qwen3moe-q8_0.gguf"},
	{"gpt-oss", "arch/synth-gpt-oss-mxfp4.gguf"},
	{"qwen35", "arch/synth-qwen35-f16.gguf"},
	// Per-layer head sizes and KV head counts (dense), per-layer inputs and shared KV layers (e).
	{"gemma4-dense", "synth:gemma4:dense:q8_0"},
	{"gemma4-e", "synth:gemma4:e:q8_0"},
}

// decodeStep returns a function that decodes one more token of sequence 0, wrapping around
// before the cache fills.
func decodeStep(tb testing.TB, c *runner.Session) func() {
	var bt batch.Batch
	seq := []int32{0}
	pos := int32(0)
	return func() {
		if pos == 256 {
			c.KV().Clear()
			pos = 0
		}
		bt.Clear()
		bt.Add(1, pos, seq, true)
		if err := c.Decode(&bt); err != nil {
			tb.Fatal(err)
		}
		pos++
	}
}

// TestDecodeAllocatesNothing: a decode step of every family allocates nothing once warm.
func TestDecodeAllocatesNothing(t *testing.T) {
	for _, tc := range decodeModels {
		t.Run(tc.name, func(t *testing.T) {
			step := decodeStep(t, open(t, tc.file, runner.Options{NCtx: 512, Threads: 2}))
			for range 40 { // past the sliding windows, and every scratch slice grown
				step()
			}
			if n := testing.AllocsPerRun(50, step); n != 0 {
				t.Errorf("%.1f allocations per decode step, want 0", n)
			}
		})
	}
}

// BenchmarkDecode measures one-token decode steps of each family's model.
func BenchmarkDecode(b *testing.B) {
	for _, tc := range decodeModels {
		b.Run(tc.name, func(b *testing.B) {
			step := decodeStep(b, open(b, tc.file, runner.Options{NCtx: 512}))
			b.ReportAllocs()
			for b.Loop() {
				step()
			}
		})
	}
}

// BenchmarkDecodeQ8 is BenchmarkDecode with a Q8_0 KV cache (rows quantized as they are stored,
// attention reading the blocks), for the families whose heads fit Q8_0 blocks.
func BenchmarkDecodeQ8(b *testing.B) {
	for _, tc := range decodeModels[1:] { // stories260K's heads of 8 do not fit
		b.Run(tc.name, func(b *testing.B) {
			step := decodeStep(b, open(b, tc.file, runner.Options{NCtx: 512, KVType: quant.Q8_0}))
			b.ReportAllocs()
			for b.Loop() {
				step()
			}
		})
	}
}
