package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"

	"ubatch/runner"
)

func cmdLogits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("logits", "logits [-m MODEL] -p PROMPT -o FILE", stderr)
	var mf modelFlags
	mf.register(fs, runner.DefaultNBatch)
	prompt := fs.StringP("prompt", "p", "Once upon a time", "prompt text (BOS added as the model's metadata says; special-token text not parsed)")
	out := fs.StringP("output", "o", "", "output file: float32 little-endian, row-major [n_prompt_tokens][n_vocab] (required)")
	if err := parse(fs, args, mf.check); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("-o FILE is required")
	}
	m, lctx, _, err := mf.load(ctx, stderr, 1, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	defer lctx.Close() // before m's
	toks := m.Vocab.Encode(*prompt, true, false)
	if len(toks) == 0 {
		return fmt.Errorf("the prompt is empty: pass text with -p")
	}
	rows, err := promptLogits(lctx, toks)
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var buf [4]byte
	for _, v := range rows {
		binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
		w.Write(buf[:])
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d x %d logits for %d prompt tokens to %s\n", len(toks), m.Hparams().Vocab, len(toks), *out)
	return nil
}

// promptLogits decodes toks as sequence 0 and returns the logits of every position,
// row-major [len(toks)][n_vocab].
func promptLogits(lctx *runner.Runtime, toks []int32) ([]float32, error) {
	if len(toks) > lctx.Options().NCtx {
		return nil, fmt.Errorf("the prompt is %d tokens, but the context holds %d: shorten it or raise -c", len(toks), lctx.Options().NCtx)
	}
	nv := lctx.Hparams().Vocab
	rows := make([]float32, 0, len(toks)*nv)
	loop, err := newLoop(lctx, 1)
	if err != nil {
		return nil, err
	}
	if err := loop.Prompt(seq0, toks, func(_ int, logits []float32) { rows = append(rows, logits...) }); err != nil {
		return nil, err
	}
	return rows, nil
}
