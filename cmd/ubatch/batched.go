package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"ubatch/batch"
	"ubatch/kvcache"
	"ubatch/runner"
	"ubatch/sample"
	"ubatch/tokenizer"
)

// cmdBatched is llama.cpp's llama-batched example: the prompt is decoded once for all N
// sequences (each prompt token carries every sequence id, so its KV blocks are shared), then the N
// sequences are decoded together, one token each per batch, each with its own seeded sampler.
func cmdBatched(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("batched", "batched [-m MODEL] [-p PROMPT] [-np N] [-n TOKENS] [sampling flags]", stderr)
	var mf modelFlags
	var sf samplingFlags
	mf.register(fs, 2048)
	sf.register(fs)
	prompt := fs.StringP("prompt", "p", "Once upon a time", "prompt text shared by all sequences")
	np := fs.Int("parallel", 4, "number of parallel sequences")
	n := fs.IntP("n-predict", "n", 32, "tokens to generate per sequence")
	if err := parse(fs, args, mf.check, sf.check, func() error { return atLeast("-np", *np, 1) }, func() error { return atLeast("-n", *n, 1) }); err != nil {
		return err
	}
	m, loadTime, err := mf.open(ctx, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	toks := m.Vocab.Encode(*prompt, true, true)
	lctx, err := mf.newContext(m, *np, func(o *runner.Options) {
		if o.NCtx == 0 { // room for the shared prompt once and every sequence's own tokens
			o.NCtx = len(toks) + *np*(*n+o.BlockSize) + o.BlockSize
		}
	})
	if err != nil {
		return err
	}
	defer lctx.Close()
	if _, err := promptTokens(m, *prompt, lctx.Options().NCtx); err != nil {
		return err
	}
	res, err := runBatched(ctx, lctx, m.Vocab, toks, *np, *n, sf.params(m.Vocab.EOG()))
	if err != nil {
		return err
	}
	for i, text := range res.texts {
		fmt.Fprintf(stdout, "\nsequence %d:\n\n%s%s\n", i, *prompt, text)
	}
	fmt.Fprintf(stderr, "\nbatched: decoded %d prompt tokens once for %d sequences in %.2f s (%.2f t/s)\n",
		len(toks), *np, res.tPrompt.Seconds(), float64(len(toks))/res.tPrompt.Seconds())
	fmt.Fprintf(stderr, "batched: generated %d tokens in %.2f s (%.2f t/s over all sequences)\n",
		res.generated, res.tGen.Seconds(), float64(res.generated)/res.tGen.Seconds())
	fmt.Fprintf(stderr, "batched: total %d tokens in %.2f s (%.2f t/s); load %.2f s\n",
		len(toks)+res.generated, (res.tPrompt + res.tGen).Seconds(),
		float64(len(toks)+res.generated)/(res.tPrompt+res.tGen).Seconds(), loadTime.Seconds())
	st := res.kvAfterPrompt
	fmt.Fprintf(stderr, "batched: KV blocks after the prompt: %d used, %d shared (block %d tokens); at the end: %d used, %d shared, %d free of %d\n",
		st.Used, st.Shared, st.BlockSize, res.kvEnd.Used, res.kvEnd.Shared, res.kvEnd.Free, res.kvEnd.Total)
	return nil
}

type batchedResult struct {
	texts                []string
	generated            int
	tPrompt, tGen        time.Duration
	kvAfterPrompt, kvEnd kvcache.Stats
}

// runBatched decodes toks once for np sequences, then generates up to n tokens for each (p with
// --ignore-eos bans the end-of-generation tokens).
func runBatched(ctx context.Context, lctx *runner.Context, vocab *tokenizer.Tokenizer, toks []int32, np, n int, p sample.Params) (*batchedResult, error) {
	all := make([]int32, np)
	for i := range all {
		all[i] = int32(i)
	}
	var b batch.Batch
	t0 := time.Now()
	for i, t := range toks {
		b.Add(t, int32(i), all, i == len(toks)-1)
	}
	if err := lctx.Decode(&b); err != nil {
		return nil, err
	}
	res := &batchedResult{tPrompt: time.Since(t0), kvAfterPrompt: lctx.KV().Stats(), texts: make([]string, np)}
	samplers := make([]*sample.Sampler, np)
	streams := make([]*tokenizer.Stream, np)
	row := make([]int, np) // each sequence's logits row in the last batch
	for i := range samplers {
		pi := p
		pi.Seed = p.Seed + uint64(i)
		s, err := sample.New(pi, lctx.Hparams().Vocab)
		if err != nil {
			return nil, err
		}
		for _, t := range toks {
			s.Accept(t)
		}
		samplers[i], streams[i] = s, vocab.NewStream()
		row[i] = len(toks) - 1
	}
	active := np
	done := make([]bool, np)
	pos := int32(len(toks))
	t1 := time.Now()
	for step := 0; step < n && active > 0 && ctx.Err() == nil; step++ {
		b.Clear()
		for i := range np {
			if done[i] {
				continue
			}
			tok, err := samplers[i].Pick(lctx.Logits(row[i]))
			if err != nil {
				return nil, fmt.Errorf("sequence %d, token %d of the generation: %w", i, step, err)
			}
			samplers[i].Accept(tok)
			res.generated++
			if vocab.IsEOG(tok) { // never with --ignore-eos: p bans them
				done[i] = true
				active--
				continue
			}
			res.texts[i] += streams[i].Add(tok)
			if step == n-1 {
				continue
			}
			row[i] = b.Len()
			b.Add(tok, pos, all[i:i+1], true)
		}
		if b.Len() == 0 {
			break
		}
		if err := lctx.Decode(&b); err != nil {
			return nil, err
		}
		pos++
	}
	for i := range np {
		res.texts[i] += streams[i].Flush()
	}
	res.tGen = time.Since(t1)
	res.kvEnd = lctx.KV().Stats()
	return res, nil
}
