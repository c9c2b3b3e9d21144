package server

import (
	"slices"
	"testing"
)

// TestRepeatedPromptKeepsPartialBlock sends one 44-token prompt six times, one after the other,
// then once with n = 4. With blocks of 16 a prompt of 44 tokens is two full blocks and 12 cells
// of a third, which the first request's generated tokens fill. Every later request must take 43
// tokens from the cache (all but the last, whose logits are needed): the two full blocks and 11
// cells copied from the cached third one. Before the fix the third request got 32 (a duplicate
// of the third block had replaced the original as its parent's child and took the entry with it
// on release). The n = 4 followers copy the 11 cells of the first sequence's live partial block.
func TestRepeatedPromptKeepsPartialBlock(t *testing.T) {
	e := newEnv(t, envOptions{})
	toks := e.model.Vocab.Encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big tree with red apples.", true, false)
	if len(toks) < 44 {
		t.Fatalf("the text makes %d tokens, the test needs 44", len(toks))
	}
	prompt := toks[:44]
	var cached []int
	for range 6 {
		res := e.Complete(map[string]any{"prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": true})
		if res.Usage.PromptTokens != 44 {
			t.Fatalf("prompt_tokens %d, want 44", res.Usage.PromptTokens)
		}
		cached = append(cached, res.Usage.PromptTokensDetails.CachedTokens)
	}
	if want := []int{0, 43, 43, 43, 43, 43}; !slices.Equal(cached, want) {
		t.Fatalf("cached tokens of six identical prompts: %v, want %v", cached, want)
	}

	// n = 4 on a prompt the cache has not seen: the usage counts the first sequence's cached
	// tokens, so read the followers' reuse from the engine's counters.
	other := slices.Clone(prompt)
	other[1] = (other[1] + 1) % int32(e.model.Hparams().Vocab)
	before := e.eng.Stats()
	res := e.Complete(map[string]any{"prompt": other, "max_tokens": 4, "temperature": 0, "n": 4, "ignore_eos": true})
	if len(res.Choices) != 4 {
		t.Fatalf("%d choices, want 4", len(res.Choices))
	}
	after := e.eng.Stats()
	// The first sequence may take BOS from the cache (the same first token as before); the
	// prompt's 43 leading tokens are then computed once and the last by each sequence for its
	// logits.
	first := res.Usage.PromptTokensDetails.CachedTokens
	if got, want := after.PromptCached-before.PromptCached, uint64(first+3*43); got != want {
		t.Fatalf("n = 4 took %d prompt tokens from the cache, want %d (%d for the first sequence)", got, want, first)
	}
	if got, want := after.PromptComputed-before.PromptComputed, uint64(44-first+3); got != want {
		t.Fatalf("n = 4 computed %d prompt tokens, want %d", got, want)
	}
}
