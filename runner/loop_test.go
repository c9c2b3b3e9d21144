package runner_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"ubatch/internal/testdata"
	"ubatch/model"
	_ "ubatch/model/all"
	"ubatch/quant"
	"ubatch/runner"
)

// loopContext is a Session over a new Runtime of stories260K with opts (F32 KV, one thread).
func loopContext(t *testing.T, opts runner.Options) *runner.Session {
	t.Helper()
	m, err := model.Open(testdata.Model(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	opts.KVType, opts.Threads = quant.F32, 1
	c, err := runner.New(m.Graph, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, err := runner.NewSession(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func argmax(x []float32) int32 {
	return int32(slices.Index(x, slices.Max(x)))
}

var prompt = []int32{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 300, 310, 320}

// promptRows is every position's logits of prompt decoded by a loop over a context with n_batch nb.
func promptRows(t *testing.T, nb int) [][]float32 {
	c := loopContext(t, runner.Options{NCtx: 128, NBatch: nb, NUBatch: nb})
	l, err := runner.NewLoop(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]float32
	if err := l.Prompt([]int32{0}, prompt, func(i int, out []float32) {
		if i != len(rows) {
			t.Errorf("output of token %d after %d rows", i, len(rows))
		}
		rows = append(rows, slices.Clone(out))
	}); err != nil {
		t.Fatal(err)
	}
	if l.Pos(0) != int32(len(prompt)) || !slices.Equal(l.Out(0), rows[len(rows)-1]) {
		t.Errorf("after the prompt: position %d, last output kept %v", l.Pos(0), l.Out(0) != nil)
	}
	return rows
}

// TestLoopPrompt: a prompt fed in chunks of n_batch gives every position the logits of one batch.
func TestLoopPrompt(t *testing.T) {
	whole := promptRows(t, 64)
	for _, tc := range []struct {
		name string
		nb   int
	}{{"chunks of 5", 5}, {"one token at a time", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			rows := promptRows(t, tc.nb)
			if len(rows) != len(prompt) {
				t.Fatalf("%d rows for %d tokens", len(rows), len(prompt))
			}
			for i := range rows {
				if e := testdata.RelRMS(rows[i], whole[i]); e > 1e-4 {
					t.Errorf("position %d: relative RMS %.2e from one batch", i, e)
				}
			}
		})
	}
}

// TestLoopGenerate: n rounds sample n tokens and decode n-1 of them, each the argmax of the
// previous one's logits as a hand-written greedy loop finds it; a sequence ends when the
// callback says so or the context is full; an error stops the loop.
func TestLoopGenerate(t *testing.T) {
	greedy := func(got *[]int32, stopAt int) runner.Next {
		return func(_ int, logits []float32) (int32, bool, error) {
			if len(*got) == stopAt {
				return 0, false, nil
			}
			*got = append(*got, argmax(logits))
			return (*got)[len(*got)-1], true, nil
		}
	}
	// The reference: prompt, then one token per decode, by hand.
	c := loopContext(t, runner.Options{NCtx: 64})
	l, _ := runner.NewLoop(c, 1)
	if err := l.Prompt([]int32{0}, prompt, nil); err != nil {
		t.Fatal(err)
	}
	var want []int32
	for range 10 {
		want = append(want, argmax(l.Out(0)))
		if _, err := l.Step(func(int, []float32) (int32, bool, error) { return want[len(want)-1], true, nil }); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name        string
		nCtx, n     int
		stopAt      int
		tokens      int // sampled
		runs        int // decodes
		wantErr     bool
		failOnToken int // the callback fails at this token (0: never)
	}{
		{name: "n rounds", nCtx: 64, n: 10, stopAt: -1, tokens: 10, runs: 9},
		{name: "ended by the callback", nCtx: 64, n: 10, stopAt: 4, tokens: 4, runs: 4},
		{name: "unbounded to a full context", nCtx: 16, n: -1, stopAt: -1, tokens: 16 - len(prompt), runs: 16 - len(prompt)},
		{name: "a callback error", nCtx: 64, n: 10, stopAt: -1, tokens: 2, runs: 2, wantErr: true, failOnToken: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := loopContext(t, runner.Options{NCtx: tc.nCtx})
			l, err := runner.NewLoop(c, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Prompt([]int32{0}, prompt, nil); err != nil {
				t.Fatal(err)
			}
			var got []int32
			next := greedy(&got, tc.stopAt)
			if tc.failOnToken > 0 {
				inner := next
				next = func(s int, logits []float32) (int32, bool, error) {
					if len(got) == tc.failOnToken-1 {
						return 0, false, errors.New("callback failed")
					}
					return inner(s, logits)
				}
			}
			err = l.Generate(context.Background(), tc.n, next)
			if (err != nil) != tc.wantErr || len(got) != tc.tokens || l.Runs != tc.runs {
				t.Fatalf("Generate: %v, %d tokens, %d decodes; want error %v, %d tokens, %d decodes", err, len(got), l.Runs, tc.wantErr, tc.tokens, tc.runs)
			}
			if n := min(len(got), len(want)); !slices.Equal(got[:n], want[:n]) {
				t.Errorf("tokens %v, want %v", got, want[:n])
			}
		})
	}
}

// TestLoopPrompts: prompts of several sequences packed into chunks give each sequence the
// output of its prompt alone; a step then decodes one token for each and allocates nothing.
func TestLoopPrompts(t *testing.T) {
	prompts := [][]int32{prompt[:7], prompt[:3], {}, prompt}
	alone := make([][]float32, len(prompts))
	for i, p := range prompts {
		if len(p) == 0 {
			continue
		}
		c := loopContext(t, runner.Options{NCtx: 64})
		l, _ := runner.NewLoop(c, 1)
		if err := l.Prompt([]int32{0}, p, nil); err != nil {
			t.Fatal(err)
		}
		alone[i] = slices.Clone(l.Out(0))
	}
	c := loopContext(t, runner.Options{NCtx: 256, NBatch: 8, NUBatch: 8, NSeqMax: 4})
	l, err := runner.NewLoop(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Prompts(prompts); err != nil {
		t.Fatal(err)
	}
	// 23 tokens in chunks of 8: only the prompt ending in the last chunk has its output left.
	for i, p := range prompts {
		out := l.Out(i)
		switch {
		case l.Pos(i) != int32(len(p)):
			t.Errorf("sequence %d at position %d, want %d", i, l.Pos(i), len(p))
		case i == 3 && (out == nil || testdata.RelRMS(out, alone[i]) > 1e-4):
			t.Errorf("sequence %d: its prompt's output differs from alone", i)
		case i != 3 && out != nil:
			t.Errorf("sequence %d: an output from an earlier chunk", i)
		}
	}
	next := func(s int, out []float32) (int32, bool, error) { return int32(300 + s), true, nil }
	if n, err := l.Step(next); err != nil || n != 4 {
		t.Fatalf("Step: %d tokens, %v", n, err)
	}
	for i, p := range prompts {
		if l.Pos(i) != int32(len(p)+1) || l.Out(i) == nil {
			t.Errorf("sequence %d after a step: position %d, output %v", i, l.Pos(i), l.Out(i) != nil)
		}
	}
	if allocs := testing.AllocsPerRun(20, func() {
		if _, err := l.Step(next); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("%.1f allocations per step, want 0", allocs)
	}
	if _, err := runner.NewLoop(c, 5); err == nil {
		t.Error("a loop of more sequences than the context has")
	}
}
