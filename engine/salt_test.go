package engine

import (
	"context"
	"slices"
	"testing"

	"ubatch/kvcache"
)

// TestSaltsSeparatePrefixes runs one prompt under two salts and none, twice each: the first run
// of each salt takes nothing from the cache (the other salts' blocks of the same tokens are
// there), the second takes all it can of its own, and the outputs are the same throughout.
func TestSaltsSeparatePrefixes(t *testing.T) {
	d := newFake(t, 64, 4, 2)
	e := start(t, d, Limits{NCtx: 512, NSeqMax: 2, NBatch: 64, Vocab: vocab}, Config{})
	p := prompt(30, 5)
	a, b := kvcache.NewSalt("a"), kvcache.NewSalt("b")
	tests := []struct {
		name   string
		salt   kvcache.Salt
		cached int
	}{
		{name: "a", salt: a},
		{name: "b", salt: b},
		{name: "none", salt: kvcache.Salt{}},
		{name: "a again", salt: a, cached: 29},
		{name: "b again", salt: b, cached: 29},
		{name: "none again", salt: kvcache.Salt{}, cached: 29},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 5, Sampling: greedy(), Salt: tc.salt})
			if err != nil {
				t.Fatal(err)
			}
			got, last := collect(t, s)
			if !slices.Equal(got, expected(p, 5)) {
				t.Fatalf("output %v, want %v", got, expected(p, 5))
			}
			if last.Usage.CachedTokens != tc.cached {
				t.Fatalf("%d cached tokens, want %d", last.Usage.CachedTokens, tc.cached)
			}
		})
	}
}
