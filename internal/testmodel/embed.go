package testmodel

import (
	"errors"
	"fmt"
	"math"

	"ubatch/engine"
	"ubatch/runner"
)

// Embed computes the sentence embedding of toks in s (over a Runtime made with
// Options.Embeddings) as llama.cpp's llama-embedding does, on a context of its own (no engine): the final-norm hidden
// states pool reads ("" is PoolMean), summed, scaled to unit L2 norm. It uses sequence 0 and
// leaves the cache empty; toks must fit the context. The tests hold the engine's embeddings to
// it.
func Embed(s *runner.Session, toks []int32, pool engine.Pooling) ([]float32, error) {
	c := s.Runtime()
	if !c.Options().Embeddings {
		return nil, errors.New("testmodel: the context was not made with Options.Embeddings")
	}
	if _, err := engine.ParsePooling(string(pool)); pool != "" && err != nil {
		return nil, err
	}
	switch {
	case len(toks) == 0:
		return nil, errors.New("empty input")
	case len(toks) > c.Options().NCtx:
		return nil, fmt.Errorf("input of %d tokens is longer than the embedding context (%d)", len(toks), c.Options().NCtx)
	}
	defer s.KV().SeqFree(0)
	l, err := runner.NewLoop(s, 1)
	if err != nil {
		return nil, err
	}
	sum := make([]float64, c.Hparams().Dim)
	add := func(e []float32) {
		for j, v := range e {
			sum[j] += float64(v)
		}
	}
	seq := []int32{0}
	switch pool {
	case engine.PoolLast:
		if err = l.Prompt(seq, toks, nil); err == nil {
			add(l.Out(0))
		}
	default: // mean, or cls: the first token's state
		err = l.Prompt(seq, toks, func(i int, e []float32) {
			if pool != engine.PoolCLS || i == 0 {
				add(e)
			}
		})
	}
	if err != nil {
		return nil, err
	}
	var norm float64
	for _, v := range sum {
		norm += v * v
	}
	out := make([]float32, len(sum))
	if norm = math.Sqrt(norm); norm > 0 {
		for j, v := range sum {
			out[j] = float32(v / norm)
		}
	}
	return out, nil
}
