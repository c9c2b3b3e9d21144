package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"ubatch/model"
	"ubatch/runner"
	"ubatch/sample"
)

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", "run [-m MODEL] [-p PROMPT] [-n N] [sampling flags]\n\nWithout -p (or -f) a chat: a >>> prompt reads messages from stdin, each answered with the conversation\nso far (through the model's chat template, if it has one); \"\"\" begins and ends a message of several lines,\n/clear forgets the conversation, /bye or Ctrl-D exits.", stderr)
	var mf modelFlags
	var sf samplingFlags
	mf.register(fs, runner.DefaultNBatch)
	sf.register(fs)
	prompt := fs.StringP("prompt", "p", "", "prompt text, generated from once (special-token text such as <s> is parsed as those tokens); without it (and -f), a chat on stdin")
	file := fs.StringP("file", "f", "", "read the prompt from this file (instead of -p)")
	n := fs.IntP("n-predict", "n", 128, "number of tokens to generate (-1 = until end of generation or a full context); in a chat, of each reply")
	if err := parse(fs, args, mf.check, sf.check, func() error { return atLeast("-n", *n, -1) }); err != nil {
		return err
	}
	if *file != "" {
		data, err := os.ReadFile(*file)
		if err != nil {
			return fmt.Errorf("-f: %w", err)
		}
		*prompt = string(data)
	}
	m, lctx, loadTime, err := mf.load(ctx, stderr, 1, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	defer lctx.Close() // before m's
	if !fs.Changed("prompt") && *file == "" {
		return runChat(ctx, m, lctx, sf.params(m.Vocab.EOG()), *n, os.Stdin, stdout)
	}
	toks, err := promptTokens(m, *prompt, lctx.Options().NCtx)
	if err != nil {
		return err
	}
	smp, err := sample.New(sf.params(m.Vocab.EOG()), m.Hparams().Vocab)
	if err != nil {
		return err
	}
	for _, t := range toks {
		smp.Accept(t)
	}
	// llama-cli's --no-display-prompt (a llama.cpp flag, registered by parse) prints only the text
	// generated, for scripts that read it.
	if hide, _ := fs.GetBool("no-display-prompt"); !hide {
		fmt.Fprint(stdout, *prompt)
	}

	loop, err := newLoop(lctx, 1)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := loop.Prompt(seq0, toks, nil); err != nil {
		return err
	}
	tPrompt := time.Since(t0)
	stream := m.Vocab.NewStream()
	limit := *n
	if limit < 0 {
		limit = lctx.Options().NCtx
	}
	gen := 0
	t1 := time.Now()
	err = loop.Generate(ctx, limit, func(_ int, logits []float32) (int32, bool, error) {
		tok, err := smp.Pick(logits)
		if err != nil {
			return 0, false, fmt.Errorf("token %d of the generation: %w", gen, err)
		}
		smp.Accept(tok)
		gen++
		if m.Vocab.IsEOG(tok) { // never with --ignore-eos: the sampler bans them
			return 0, false, nil
		}
		fmt.Fprint(stdout, stream.Add(tok))
		return tok, true, nil
	})
	if err != nil {
		fmt.Fprintln(stdout, stream.Flush())
		return err
	}
	fmt.Fprintln(stdout, stream.Flush())
	tGen := time.Since(t1)
	printPerf(stderr, loadTime, len(toks), tPrompt, gen, tGen)
	return nil
}

var seq0 = []int32{0}

// promptTokens tokenizes a prompt (BOS as the model says) and checks it fits the context.
func promptTokens(m *model.Model, prompt string, nCtx int) ([]int32, error) {
	toks := m.Vocab.Encode(prompt, true, true)
	if len(toks) == 0 || (len(toks) == 1 && prompt == "") {
		return nil, fmt.Errorf("the prompt is empty: pass text with -p")
	}
	if len(toks) >= nCtx {
		return nil, fmt.Errorf("the prompt is %d tokens, but the context holds %d: shorten it or raise -c", len(toks), nCtx)
	}
	return toks, nil
}

// printPerf prints timings in the spirit of llama.cpp's llama_perf_context_print.
func printPerf(w io.Writer, load time.Duration, nPrompt int, tPrompt time.Duration, nGen int, tGen time.Duration) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	per := func(d time.Duration, n int) (float64, float64) {
		if n == 0 {
			return 0, 0
		}
		return ms(d) / float64(n), float64(n) / d.Seconds()
	}
	fmt.Fprintf(w, "\nperf:        load time = %10.2f ms\n", ms(load))
	a, b := per(tPrompt, nPrompt)
	fmt.Fprintf(w, "perf: prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n", ms(tPrompt), nPrompt, a, b)
	a, b = per(tGen, nGen)
	fmt.Fprintf(w, "perf:        eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n", ms(tGen), nGen, a, b)
	fmt.Fprintf(w, "perf:       total time = %10.2f ms / %5d tokens\n", ms(load+tPrompt+tGen), nPrompt+nGen)
}
