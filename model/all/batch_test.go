package all_test

import (
	"testing"

	"ubatch/batch"
	"ubatch/internal/testdata"
	"ubatch/quant"
	"ubatch/runner"
)

// aloneLogits runs one sequence's whole history through a fresh context, one batch, and returns
// the logits at every position.
func aloneLogits(t *testing.T, model string, kv quant.Type, tiled bool, toks []int32) [][]float32 {
	c := open(t, model, runner.Options{NCtx: 256, KVType: kv, Threads: 2, TiledAttention: tiled})
	return promptLogits(t, c, toks)
}

// TestBatchedEqualsAlone decodes several sequences together — mixed prompt lengths, prefill
// chunks of some sequences in the same batch as decode tokens of others, a prompt shared by three
// sequences decoded once — and checks every logit row against the same sequence run alone.
func TestBatchedEqualsAlone(t *testing.T) {
	cases := []struct {
		name   string
		model  string
		kv     quant.Type
		maxRel float64
		tiled  bool // tiled attention where the CPU has the kernel's assembly, else exact
	}{
		{"stories-f32", "stories260K.gguf", quant.F32, 1e-4, false},
		{"stories-f16", "stories260K.gguf", quant.F16, 1e-4, false},
		// Quantized models re-round activations to 8 bits before every matmul: a last-ulp
		// difference between kernel paths for different column counts can flip one rounding and
		// move the logits by ~0.5%. The bound is well inside the Engine-core tolerance (3-5%).
		{"synth-q4_k_m", "synth-tiny-q4_k_m.gguf", quant.F16, 1e-2, false},
		{"synth-q8_0", "synth-tiny-q8_0.gguf", quant.F16, 1e-2, false},
		// One model per family: biases, Q/K norms, fused matrices, sliding windows (seq 0's
		// 30 tokens pass gemma's 16-token window) and soft-caps must all act per token and
		// per sequence.
		{"llama3", "arch/synth-llama3-q8_0.gguf", quant.F16, 1e-2, false},
		{"qwen2", "arch/synth-qwen2-q8_0.gguf", quant.F16, 1e-2, false},
		{"qwen3", "arch/synth-qwen3-q8_0.gguf", quant.F16, 1e-2, false},
		{"gemma2", "arch/synth-gemma2-q8_0.gguf", quant.F16, 1e-2, false},
		{"gemma3", "arch/synth-gemma3-q8_0.gguf", quant.F16, 1e-2, false},
		{"phi3", "arch/synth-phi3-q8_0.gguf", quant.F16, 1e-2, false},
		// Experts: the micro-batch's tokens are grouped by expert, so a token's expert matmuls
		// run over other sequences' columns; its result must not depend on them.
		{"qwen3moe", "arch/synth-qwen3moe-q8_0.gguf", quant.F16, 1e-2, false},
		// Sinks, the window on even layers and expert biases, on MXFP4 experts.
		{"gpt-oss", "arch/synth-gpt-oss-mxfp4.gguf", quant.F16, 1e-2, false},
		// A Q8_0 cache: the same rows are quantized alike whatever the batch.
		{"synth-f16-q8_0kv", "synth-tiny-f16.gguf", quant.Q8_0, 1e-4, false},
		{"synth-q8_0-q8_0kv", "synth-tiny-q8_0.gguf", quant.Q8_0, 1e-2, false},
		{"gemma2-q8_0kv", "arch/synth-gemma2-q8_0.gguf", quant.Q8_0, 1e-2, false},
		{"qwen3-q8_0kv", "arch/synth-qwen3-q8_0.gguf", quant.Q8_0, 1e-2, false},
		// Gemma 4: per-layer head sizes, layers that read the KV other layers stored (this
		// micro-batch's among them), per-layer inputs, a window of 8.
		{"gemma4-dense", "synth:gemma4:dense:q8_0", quant.F16, 1e-2, false},
		{"gemma4-moe", "synth:gemma4:moe:q8_0", quant.F16, 1e-2, false},
		{"gemma4-e", "synth:gemma4:e:q8_0", quant.F16, 1e-2, false},
		{"gemma4-e-tiled", "synth:gemma4:e:q8_0", quant.F16, 1e-2, true},
		{"gemma4-e-q8_0kv", "synth:gemma4:e:q8_0", quant.Q8_0, 1e-2, false},
	}
	hist := [][]int32{ // each sequence's full token history
		{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 300, 310, 320, 330, 340, 350, 360, 370, 380, 390,
			400, 401, 402, 404, 405, 406, 408, 409, 420, 421},
		{1, 300, 301, 302, 303, 304, 305, 306},
		{1, 410, 411, 412, 413, 414, 415},
		{1, 410, 411, 412, 413, 420},
		{1, 410, 411, 412, 413, 430, 431},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := open(t, tc.model, runner.Options{NCtx: 256, NSeqMax: 5, NUBatch: 8, KVType: tc.kv, Threads: 2, TiledAttention: tc.tiled})
			got := make([][][]float32, len(hist))
			for s := range hist {
				got[s] = make([][]float32, len(hist[s]))
			}
			var b batch.Batch
			run := func(add func()) {
				b.Clear()
				add()
				if err := c.Decode(&b); err != nil {
					t.Fatal(err)
				}
				for i := range b.Len() {
					for _, s := range b.Seqs[i] {
						got[s][b.Pos[i]] = append([]float32(nil), c.Logits(i)...)
					}
				}
			}
			// 1: seq 1 prefills 3 tokens alone.
			run(func() {
				for p := range 3 {
					b.Add(hist[1][p], int32(p), []int32{1}, true)
				}
			})
			// 2: the shared prefix of seqs 2-4 once, with all three ids, plus seq 1's next 2 tokens.
			run(func() {
				for p := range 5 {
					b.Add(hist[2][p], int32(p), []int32{2, 3, 4}, true)
				}
				for p := 3; p < 5; p++ {
					b.Add(hist[1][p], int32(p), []int32{1}, true)
				}
			})
			if st := c.KV().Stats(); st.Shared != 1 || st.Used != 2 {
				t.Errorf("after the shared prefix: want seqs 2-4 on one shared block (2 used: seq 1's and the shared one), got %+v", st)
			}
			// 3: seq 0's whole prompt (split over micro-batches of 8), decode tokens of 1-4.
			run(func() {
				for p := range hist[0] {
					b.Add(hist[0][p], int32(p), []int32{0}, true)
				}
				b.Add(hist[1][5], 5, []int32{1}, true)
				for s := 2; s <= 4; s++ {
					b.Add(hist[s][5], 5, []int32{int32(s)}, true)
				}
			})
			// 4: the remaining tokens, one decode step each.
			run(func() {
				b.Add(hist[1][6], 6, []int32{1}, true)
				b.Add(hist[2][6], 6, []int32{2}, true)
				b.Add(hist[4][6], 6, []int32{4}, true)
			})
			run(func() { b.Add(hist[1][7], 7, []int32{1}, true) })
			for s, h := range hist {
				want := aloneLogits(t, tc.model, tc.kv, tc.tiled, h)
				for p := range h {
					if got[s][p] == nil {
						t.Fatalf("seq %d pos %d was never decoded", s, p)
					}
					if e := testdata.RelRMS(got[s][p], want[p]); e > tc.maxRel {
						t.Errorf("seq %d pos %d: batched vs alone relative RMS %.2e > %.0e", s, p, e, tc.maxRel)
					}
				}
			}
		})
	}
}
