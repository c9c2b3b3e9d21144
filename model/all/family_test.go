package all_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/runner"
)

// TestFamiliesMatchLlamaCpp compares every prompt position's logits with llama.cpp's for one
// small model per architecture family (../shared/models/arch, Q8_0). The shared README calibrates
// the bound: llama.cpp on the same weights dequantized to F32 lands 1.3-2.7% from these
// references, a structural error (wrong rope type, a missing bias, window or soft-cap) 50-90%.
// Measured worst relative RMS over the prompt is noted per family. Top-1 must agree wherever
// llama.cpp's top-2 margin is more than four times the RMS difference.
func TestFamiliesMatchLlamaCpp(t *testing.T) {
	cases := []struct {
		name   string
		maxRel float64
		ties   int // positions allowed past maxRel, up to tieRel: a router's near tie (experts)
	}{
		{"synth-llama3-q8_0", 0.06, 0}, // measured 1.73%
		{"synth-qwen2-q8_0", 0.06, 0},  // 1.81%
		{"synth-qwen3-q8_0", 0.06, 0},  // 1.35%
		{"synth-gemma2-q8_0", 0.06, 0}, // 2.49%
		{"synth-gemma3-q8_0", 0.06, 0}, // 2.63%
		{"synth-phi3-q8_0", 0.06, 0},   // 1.62%
		// Experts: softmax top-2 of 8, renormalised. llama.cpp on the same weights in F32 lands
		// 3.8% from its reference (shared README); measured 1.85%. Decisive routing leaves the
		// chosen two nearly all the probability, so weights not renormalised are only 5.5% off:
		// the bound is tighter than the others' to catch that.
		{"synth-qwen3moe-q8_0", 0.04, 0},
		// gpt-oss: top-2 of 8 then a softmax over the two, sinks, a window on even layers, YaRN,
		// the clamped SwiGLU, MXFP4 experts. llama.cpp on the same weights in F32 lands 4.6%
		// from its reference (shared README); measured 4.15% on 23 positions. At position 16
		// layer 1's router has experts 1 and 0 at 3.3317 and 3.3266, a tie that activation
		// rounding decides either way: that row is 24.5% off (on the avx2 and go kernel paths).
		// The next closest second choice, 0.0104 apart at position 19, may go either way on
		// another path: so two rows may reach tieRel. Ignoring the sinks puts every row 16-116%
		// off, the window rows 8-23 17-96%, YaRN 16-73%, plain SwiGLU 28-70% (measured): far
		// past two rows.
		{"synth-gpt-oss-mxfp4", 0.06, 2},
		// qwen35: three gated delta nets (recurrent state per sequence) and gated attention
		// with partial NEOX rope, F16. llama.cpp on the same weights in F32 lands 0.35% from
		// its reference (shared README); measured 0.35%. With one piece disabled (measured):
		// conv state 152%, L2 norms 135%, value head h reading key head h/2 instead of h mod 2
		// 151%, beta 1 109%, no decay 144%, no gated RMSNorm 144%, no silu(z) 152%, no output
		// gate 44%, rope on the whole head 18%, normal instead of NEOX rope 9.8%, no rope 9.8%,
		// no Q/K norms 15%.
		{"synth-qwen35-f16", 0.01, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ref := testdata.LoadReference(t, tc.name)
			c := open(t, "arch/"+tc.name+".gguf", runner.Options{NCtx: 128, Threads: 2})
			rows := promptLogits(t, c, ref.PromptTokens)
			checkLogitsTies(t, rows, ref, tc.maxRel, 4, tc.ties)
			checkGreedy(t, c, rows[len(rows)-1], ref)
		})
	}
}

// checkGreedy continues the prompt greedily and compares with llama.cpp's greedy tokens while
// they are clear choices: at the first step whose top-2 margin is below 2% of the logits' spread
// (where rounding noise may pick either) the two continuations may part, and it stops there.
func checkGreedy(t *testing.T, c *runner.Session, last []float32, ref *testdata.Reference) {
	t.Helper()
	loop, err := runner.NewLoop(c, 1) // goes on from the prompt in c's KV cache
	if err != nil {
		t.Fatal(err)
	}
	i, tie := 0, false
	err = loop.Generate(context.Background(), len(ref.GreedyTokens), func(_ int, logits []float32) (int32, bool, error) {
		if logits == nil { // the prompt's, decoded before the loop
			logits = last
		}
		got, want := argmax(logits), ref.GreedyTokens[i]
		if got != want {
			if margin, spread := top2Margin(logits); margin > 0.02*spread {
				return 0, false, fmt.Errorf("greedy token %d = %d, llama.cpp %d, with a clear margin %.3f (spread %.3f)", i, got, want, margin, spread)
			}
			tie = true
			return 0, false, nil
		}
		i++
		return got, true, nil
	})
	switch {
	case err != nil:
		t.Fatal(err)
	case tie:
		t.Logf("greedy: %d tokens equal, then a near tie", i)
	default:
		t.Logf("greedy: all %d tokens equal", i)
	}
}

// top2Margin is the gap between the two largest logits, and the spread max-min.
func top2Margin(x []float32) (margin, spread float32) {
	a, b, lo := float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(1))
	for _, v := range x {
		switch {
		case v > a:
			a, b = v, a
		case v > b:
			b = v
		}
		lo = min(lo, v)
	}
	return a - b, a - lo
}

// checkLogits compares rows, the logits of every prompt position, with llama.cpp's in ref: each
// within maxRel relative RMS error, and the same top-1 token wherever llama.cpp's top-2 margin is
// more than clear times the RMS difference of the two rows. It logs the worst error.
func checkLogits(t *testing.T, rows [][]float32, ref *testdata.Reference, maxRel, clear float64) {
	t.Helper()
	checkLogitsTies(t, rows, ref, maxRel, clear, 0)
}

// tieRel bounds the rows checkLogitsTies lets past maxRel: a near tie in a router sends a token
// to another expert (25% measured), a structural error puts most rows past 50%.
const tieRel = 0.3

// checkLogitsTies is checkLogits with up to ties rows allowed past maxRel, none past tieRel. It
// logs the worst error of the other rows.
func checkLogitsTies(t *testing.T, rows [][]float32, ref *testdata.Reference, maxRel, clear float64, ties int) {
	t.Helper()
	worst, tied := 0.0, 0
	for i, row := range rows {
		want := ref.Row(i)
		e := testdata.RelRMS(row, want)
		if e > maxRel && e <= tieRel && tied < ties {
			tied++
			t.Logf("position %d: logits relative RMS error %.4f, allowed as a router's near tie", i, e)
		} else {
			worst = max(worst, e)
			if e > maxRel {
				t.Errorf("position %d: logits relative RMS error %.4f > %.4f", i, e, maxRel)
			}
		}
		top := ref.Top10[i]
		margin := top[0][1] - top[1][1]
		if d := rmsDiff(row, want); margin > clear*d && argmax(row) != int32(top[0][0]) {
			t.Errorf("position %d: top-1 %d, llama.cpp %d (margin %.3f, RMS difference %.4f)", i, argmax(row), int32(top[0][0]), margin, d)
		}
	}
	t.Logf("worst relative RMS error %.5f over %d positions", worst, len(rows))
}
