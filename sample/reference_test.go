package sample

import (
	"testing"

	"ubatch/internal/testdata"
)

// TestReferenceLogits checks greedy selection and the LogProbs ranking against what llama.cpp
// reported for real model outputs.
func TestReferenceLogits(t *testing.T) {
	tests := []struct{ name string }{
		{name: "stories260K"}, {name: "synth-tiny-f16"}, {name: "synth-tiny-q4_k_m"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref := testdata.LoadReference(t, tc.name)
			greedy := mustNew(t, Params{Temperature: 0, TopP: 1, RepeatPenalty: 1}, ref.NVocab)
			last := ref.Row(len(ref.PromptTokens) - 1)
			if got := greedy.Sample(last); got != ref.GreedyTokens[0] {
				t.Fatalf("greedy after the prompt: %d, llama.cpp chose %d", got, ref.GreedyTokens[0])
			}
			for r := range ref.PromptTokens {
				_, top := LogProbs(ref.Row(r), 0, 10)
				for i, want := range ref.Top10[r] {
					// Rounded reference logits cannot order near-ties; compare ids only where
					// the margin to the next entry is clear.
					clear := i+1 >= len(ref.Top10[r]) || want[1]-ref.Top10[r][i+1][1] > 1e-3
					if i > 0 && ref.Top10[r][i-1][1]-want[1] <= 1e-3 {
						clear = false
					}
					if clear && top[i].Token != int32(want[0]) {
						t.Fatalf("row %d rank %d: token %d, llama.cpp lists %d", r, i, top[i].Token, int32(want[0]))
					}
				}
			}
		})
	}
}
