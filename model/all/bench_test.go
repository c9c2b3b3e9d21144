package all_test

import (
	"testing"

	"ubatch/batch"
	"ubatch/runner"
)

// BenchmarkDecodeStories measures one-token decode steps on the demo model (allocations must be 0).
func BenchmarkDecodeStories(b *testing.B) {
	c := open(&testing.T{}, "stories260K.gguf", runner.Options{NCtx: 512})
	var bt batch.Batch
	seq := []int32{0}
	b.ReportAllocs()
	pos := int32(0)
	for b.Loop() {
		if pos == 256 {
			c.KV().Clear()
			pos = 0
		}
		bt.Clear()
		bt.Add(1, pos, seq, true)
		if err := c.Decode(&bt); err != nil {
			b.Fatal(err)
		}
		pos++
	}
}
