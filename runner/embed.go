package runner

import (
	"errors"
	"fmt"
	"math"
)

// Pooling turns a prompt's per-token hidden states into one embedding.
type Pooling string

const (
	PoolMean Pooling = "mean" // the average over the prompt's tokens
	PoolLast Pooling = "last" // the last token's state
)

// ParsePooling checks a pooling name.
func ParsePooling(s string) (Pooling, error) {
	switch p := Pooling(s); p {
	case PoolMean, PoolLast:
		return p, nil
	}
	return "", fmt.Errorf("pooling %q: use mean or last", s)
}

// Embed computes the sentence embedding of toks in c (made with Options.Embeddings) as
// llama.cpp's llama-embedding does: the final-norm hidden state of every token, pooled, scaled
// to unit L2 norm. It uses sequence 0 and leaves the cache empty; toks must fit the context.
func Embed(c *Runtime, toks []int32, pool Pooling) ([]float32, error) {
	sum, err := pooled(c, toks, pool)
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

// LastHidden is the final-norm hidden state of the last token of toks in c (made with
// Options.Embeddings), not scaled: what a reranker's classification head reads. Like Embed it
// uses sequence 0 and leaves the cache empty.
func LastHidden(c *Runtime, toks []int32) ([]float32, error) {
	sum, err := pooled(c, toks, PoolLast)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(sum))
	for j, v := range sum {
		out[j] = float32(v)
	}
	return out, nil
}

// pooled decodes toks and sums the hidden states pool asks for (every token's for mean, the
// last one's for last); for mean the sum is not divided, since Embed scales it anyway.
func pooled(c *Runtime, toks []int32, pool Pooling) ([]float64, error) {
	if !c.opts.Embeddings {
		return nil, errors.New("runner: the context was not made with Options.Embeddings")
	}
	switch {
	case len(toks) == 0:
		return nil, errors.New("empty input")
	case len(toks) > c.opts.NCtx:
		return nil, fmt.Errorf("input of %d tokens is longer than the embedding context (%d)", len(toks), c.opts.NCtx)
	}
	defer c.KV().SeqFree(0)
	l, err := NewLoop(c, 1)
	if err != nil {
		return nil, err
	}
	sum := make([]float64, c.h.Dim)
	add := func(_ int, e []float32) {
		for j, v := range e {
			sum[j] += float64(v)
		}
	}
	if pool == PoolMean {
		err = l.Prompt(l.ids, toks, add)
	} else if err = l.Prompt(l.ids, toks, nil); err == nil {
		add(0, l.Out(0))
	}
	if err != nil {
		return nil, err
	}
	return sum, nil
}
